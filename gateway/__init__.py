"""gateway: the HTTP front door of a pipeline (``slipstream gateway``), speaking the Open Inference
Protocol V2 (REST; JSON tensors and the binary-data extension). It produces each request with the
``streams`` client and answers from the results topic, with deadlines and accuracy floors set at the
edge and load shed with 429 + ``Retry-After`` when the pipeline cannot meet a new request's deadline.

Its own layer: it imports ``streams`` and ``schemas`` only (``tests/unit/test_layers.py``); the pure
parts (``oip``, ``shedding``) are tested without Kafka.
"""
