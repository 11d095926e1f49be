"""One arrivals reader for the tuner and the planner service when they run in one process.

A :class:`~slipstream.streams.control_io.KafkaArrivals` asks the input topic's end offsets every 20 ms
(one ListOffsets request) and follows the control topic. Where the tuner and the planner service run
side by side (the control plane of ``slipstream demo``, ``compare-live`` and ``bench goodput``, in the
load generator's process), each used to keep its own: 100 offset requests a second where 50 say the
same, the largest single cost of that process at the knee (py-spy: 2.4 of its 15.4 busy seconds in
aiokafka's offset requests, issue 40) and a third of the broker's requests.

:class:`SharedArrivals` keeps one reader and hands every chunk of arrival timestamps to each of its
:meth:`~SharedArrivals.reader`\\ s, and every control record to each reader's callbacks, as a reader of
its own would: a reader that starts later first gets the records and the history handed out before
(the control topic is read from its start, so a reader of its own would have read them too). A reader
has the interface of ``KafkaArrivals`` (``start``, ``stop``, async iteration), so ``run_tuner`` and
``run_planner`` take either; the source starts with the first reader and stops with the last. When
the source fails, every reader raises its exception.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable

import numpy as np

from .config import KafkaSettings
from .control_io import KafkaArrivals

END = None  # put on a reader's queue when the source ends; its exception when it fails


class SharedArrivals:
    def __init__(self, settings: KafkaSettings, pipeline: str, source_stage: str, *, spec=None,
                 source: Callable[..., Any] = KafkaArrivals, **kwargs: Any) -> None:
        self.key = (pipeline, source_stage)
        self._source = source(settings, pipeline, source_stage, on_stage_config=self._config,
                              on_handoff=self._handoff, on_invalid=self._invalid, spec=spec, **kwargs)
        self._readers: list[_Reader] = []
        self._handed: list[tuple[str, Any]] = []  # control records handed out so far, for later readers
        self._history: list[np.ndarray] = []  # the source's first chunk (its lookback), for later readers
        self._pump: asyncio.Task | None = None
        self._started: asyncio.Task | None = None

    def reader(self, settings: KafkaSettings, pipeline: str, source_stage: str, *,
               on_stage_config: Callable, on_handoff: Callable | None = None,
               on_invalid: Callable | None = None, **_same: Any) -> "_Reader":
        """A reader with ``KafkaArrivals``' signature (its other settings are the shared source's)."""
        if (pipeline, source_stage) != self.key:
            raise ValueError(f"arrivals of {pipeline}/{source_stage} asked of a reader of {self.key[0]}/{self.key[1]}")
        return _Reader(self, on_stage_config, on_handoff, on_invalid)

    def _each(self, kind: str, rec: Any) -> None:
        self._handed.append((kind, rec))
        for r in list(self._readers):
            r.hand(kind, rec)

    def _config(self, rec) -> None:
        self._each("StageConfig", rec)

    def _handoff(self, rec) -> None:
        self._each("TunerHandoff", rec)

    def _invalid(self) -> None:
        self._each("invalid", None)

    async def _join(self, reader: "_Reader") -> None:
        for kind, rec in self._handed:
            reader.hand(kind, rec)
        for chunk in self._history:
            reader.queue.put_nowait(chunk)
        self._readers.append(reader)
        if self._started is None:
            self._started = asyncio.ensure_future(self._source.start())
        await asyncio.shield(self._started)
        if self._pump is None:
            self._pump = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        first, end = True, END
        try:
            async for chunk in self._source:
                if first:
                    self._history.append(chunk)
                    first = False
                for r in list(self._readers):
                    r.queue.put_nowait(chunk)
        except Exception as exc:  # the source failed: every reader raises it, as its own source would
            end = exc
        finally:
            for r in list(self._readers):
                r.queue.put_nowait(end)

    async def _leave(self, reader: "_Reader") -> None:
        if reader in self._readers:
            self._readers.remove(reader)
        if self._readers or self._started is None:
            return
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        await self._source.stop()
        self._pump = self._started = None


class _Reader:
    def __init__(self, hub: SharedArrivals, on_stage_config, on_handoff, on_invalid) -> None:
        self.hub = hub
        self.callbacks = {"StageConfig": on_stage_config, "TunerHandoff": on_handoff, "invalid": on_invalid}
        self.queue: asyncio.Queue = asyncio.Queue()
        self._joined = False

    def hand(self, kind: str, rec: Any) -> None:
        cb = self.callbacks[kind]
        if cb is not None:
            cb() if kind == "invalid" else cb(rec)

    async def start(self) -> None:
        if not self._joined:
            self._joined = True
            await self.hub._join(self)

    async def stop(self) -> None:
        await self.hub._leave(self)

    def __aiter__(self) -> AsyncIterator[np.ndarray]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[np.ndarray]:
        await self.start()
        while (chunk := await self.queue.get()) is not END:
            if isinstance(chunk, Exception):
                raise chunk
            yield chunk
