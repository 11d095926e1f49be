"""A TCP proxy in front of one Kafka broker that can hold a transaction's commit: the fault of a
commit whose answer does not come in time (a coordinator paused, a network partition), on one
request, at the moment it is sent.

The broker advertises the proxy's port (``slipstream.streams.broker.LocalBroker.advertised_port``), so every
client connection goes through it. Bytes from the broker are passed as they come; requests from the
clients are read frame by frame (a 4-byte size, then the request) and passed on in order, except
that once :meth:`TxnProxy.arm` is called, the next ``EndTxn`` request that commits (API key 26,
``transaction_result`` true; aiokafka sends version 0) is held for ``hold_s`` before it goes on
(``late``: the coordinator gets it after the client gave up), or is never sent and its connection
closed (``lost``). Everything after it on the same connection waits behind it, as on a stalled link.
The proxy runs on its own thread and event loop, so it serves while the caller blocks (a broker
start).
"""
from __future__ import annotations

import asyncio
import struct
import threading

END_TXN = 26


def committing_end_txn(request: bytes) -> str | None:
    """The transactional id of an ``EndTxn`` v0-v2 request that commits (``request`` without its size
    prefix), else None."""
    if len(request) < 10:
        return None
    api_key, version = struct.unpack_from(">hh", request, 0)
    if api_key != END_TXN or version > 2:  # v3 is flexible (compact strings): aiokafka sends v0
        return None
    off = 8  # api key, version, correlation id
    (client_len,) = struct.unpack_from(">h", request, off)
    off += 2 + max(client_len, 0)
    (tid_len,) = struct.unpack_from(">h", request, off)
    tid = request[off + 2:off + 2 + tid_len].decode(errors="replace")
    off += 2 + tid_len + 8 + 2  # transactional id, producer id, producer epoch
    return tid if request[off:off + 1] == b"\x01" else None


class TxnProxy:
    def __init__(self, listen_port: int, upstream_port: int) -> None:
        self.listen_port, self.upstream_port = listen_port, upstream_port
        self.held = threading.Event()  # set when an armed commit has been caught
        self.held_ids: list[str] = []
        self._armed: tuple[str, float] | None = None
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="txn-proxy")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    def start(self) -> "TxnProxy":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the proxy did not start listening on {self.listen_port}")
        return self

    def arm(self, mode: str, hold_s: float) -> None:
        """Catch the next committing EndTxn: ``late`` (held ``hold_s``, then sent) or ``lost`` (held
        ``hold_s``, then dropped with its connection)."""
        if mode not in ("late", "lost"):
            raise ValueError(mode)
        with self._lock:
            self._armed = (mode, hold_s)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _take(self) -> tuple[str, float] | None:
        with self._lock:
            armed, self._armed = self._armed, None
            return armed

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.listen_port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            cwriter.close()
            return
        tasks = [asyncio.ensure_future(self._requests(creader, uwriter)),
                 asyncio.ensure_future(self._pass(ureader, cwriter))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for w in (cwriter, uwriter):
                w.close()

    async def _requests(self, creader: asyncio.StreamReader, uwriter: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = await creader.readexactly(4)
                request = await creader.readexactly(struct.unpack(">i", size)[0])
                tid = committing_end_txn(request)
                armed = self._take() if tid is not None else None
                if armed is not None:
                    mode, hold_s = armed
                    self.held_ids.append(tid)
                    self.held.set()
                    await asyncio.sleep(hold_s)  # the fault's length: the commit's answer cannot come
                    if mode == "lost":
                        return  # never sent; the connection closes
                uwriter.write(size + request)
                await uwriter.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    @staticmethod
    async def _pass(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            return
