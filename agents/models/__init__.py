"""Model definitions used by the zoo: real pretrained models (EfficientNet-Lite, MiniLM), seeded
synthetic models, and the cached ONNX export they share."""
