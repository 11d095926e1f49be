"""Asking running brokers: metadata round trips (how many brokers a bootstrap lists) and in-sync
replicas, each call bounded by a timeout (a probe, not a user: refused connections are expected).
"""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager


@asynccontextmanager
async def _admin(bootstrap: str, timeout_s: float):
    """An admin client of ``bootstrap`` that gives up after ``timeout_s`` per call (a probe, not a user)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        yield admin
    finally:
        await admin.close()


async def _probe(bootstrap: str, timeout_s: float) -> int:
    async with _admin(bootstrap, timeout_s) as admin:
        await asyncio.wait_for(admin.list_topics(), timeout_s)
        return len((await asyncio.wait_for(admin.describe_cluster(), timeout_s))["brokers"])


def live_brokers(bootstrap: str, timeout_s: float = 3.0) -> int:
    """Brokers the cluster's metadata lists (0 when nothing answers)."""
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # refused connections are expected here
    try:
        return asyncio.run(_probe(bootstrap, timeout_s))
    except Exception:
        return 0


def is_ready(bootstrap: str, timeout_s: float = 3.0, brokers: int = 1) -> bool:
    """A metadata round trip succeeds and lists at least ``brokers`` brokers."""
    return live_brokers(bootstrap, timeout_s) >= brokers


async def _out_of_sync(bootstrap: str, node_id: int, timeout_s: float) -> int:
    """Partitions (every topic) that have ``node_id`` as a replica but not in their in-sync set."""
    async with _admin(bootstrap, timeout_s) as admin:
        metas = await asyncio.wait_for(admin.describe_topics(await admin.list_topics()), timeout_s)
        return sum(node_id in p["replicas"] and node_id not in p["isr"] for t in metas for p in t["partitions"])


# ApiVersions v3 (KIP-511, KIP-584): besides the API version ranges, the broker answers the feature
# levels it supports and the cluster's finalized ones (tagged fields 0 and 2). aiokafka 0.14 speaks
# ApiVersions up to v2 and drops those, so this one request is encoded here.
_API_VERSIONS, _API_VERSIONS_V = 18, 3


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        import struct

        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_str(self) -> str:
        n = self.uvarint() - 1
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def _api_versions_request(correlation_id: int) -> bytes:
    import struct

    client_id = b"slipstream-probe"
    header = struct.pack(">hhih", _API_VERSIONS, _API_VERSIONS_V, correlation_id, len(client_id)) + client_id + b"\0"
    body = b"".join(_uvarint(len(s) + 1) + s for s in (b"slipstream", b"1")) + b"\0"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _parse_api_versions(payload: bytes, correlation_id: int) -> dict:
    r = _Reader(payload)
    if r.take(">i") != correlation_id:
        raise ValueError("ApiVersions answer to another request")
    error = r.take(">h")
    if error:
        raise ValueError(f"ApiVersions v{_API_VERSIONS_V} refused with error code {error}")
    apis = {}
    for _ in range(r.uvarint() - 1):
        key, lo, hi = r.take(">h"), r.take(">h"), r.take(">h")
        r.skip_tags()
        apis[key] = (lo, hi)
    r.take(">i")  # throttle time
    supported: dict[str, tuple[int, int]] = {}
    finalized: dict[str, int] = {}
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag in (0, 2):
            for _ in range(r.uvarint() - 1):
                name, a, b = r.compact_str(), r.take(">h"), r.take(">h")
                r.skip_tags()
                if tag == 0:
                    supported[name] = (a, b)  # min, max supported
                else:
                    finalized[name] = a  # max version level (the finalized one)
        r.pos = end
    return {"api_versions": apis, "supported_features": supported, "finalized_features": finalized}


async def broker_features(bootstrap: str, timeout_s: float = 3.0) -> dict:
    """The first bootstrap broker's own ApiVersions v3 answer: ``api_versions`` {api key: (min, max)},
    ``supported_features`` {name: (min, max)} and ``finalized_features`` {name: level}."""
    import struct

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout_s)
    try:
        writer.write(_api_versions_request(1))
        await writer.drain()
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
        return _parse_api_versions(await asyncio.wait_for(reader.readexactly(size), timeout_s), 1)
    finally:
        writer.close()


def broker_version(bootstrap: str, timeout_s: float = 3.0) -> dict | None:
    """What the broker says of its release: the metadata.version levels it supports (the newest names
    its release, e.g. 4.4-IV2) and the cluster's finalized one; None when it does not answer."""
    from .versions import metadata_version_name

    try:
        f = asyncio.run(broker_features(bootstrap, timeout_s))
    except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError, IndexError):
        return None
    lo, hi = f["supported_features"].get("metadata.version", (0, 0))
    fin = f["finalized_features"].get("metadata.version")
    return {"metadata_version_max": metadata_version_name(hi) if hi else None,
            "metadata_version": metadata_version_name(fin) if fin is not None else None,
            "features": f["finalized_features"]}
