"""The gateway bench's interleaving: the two paths alternate request by request, each path's latencies
come back as its own list, and every request of both is started."""
import asyncio

from slipstream.loadgen.bench.gateway import interleaved_round


def test_interleaved_rounds_alternate_the_paths_and_keep_their_latencies_apart():
    order = []

    def path(name: str, ms: float):
        async def one() -> float:
            order.append(name)
            return ms
        return one

    kafka, gateway = asyncio.run(interleaved_round(path("k", 1.0), path("g", 2.0), 4, 2000.0))
    assert kafka == [1.0] * 4 and gateway == [2.0] * 4
    assert order == ["k", "g"] * 4
