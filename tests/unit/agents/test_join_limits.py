"""A joined result over the results topic's record limit becomes an error result naming its size and
the limit (``slipstream.agents.join_worker.fit_result``), instead of a producer error after the request closed."""
from slipstream.agents.join import Joiner
from slipstream.agents.join_worker import fit_result
from slipstream.schemas.records import InferenceResult
from slipstream.streams import codec
from slipstream.streams.limits import Limits

T = 1_000_000


def part(rid: str, share: str, path: list[str], output: bytes) -> InferenceResult:
    return InferenceResult(request_id=rid, pipeline="p", status="done", created_ns=0, deadline_ns=10 * T,
                           finished_ns=1, output=output, fragment=share, path=tuple(path))


def test_a_joined_result_over_the_limit_becomes_an_error_naming_its_size_and_the_limit():
    j = Joiner(timeout_ns=T)
    j.add(part("r", "1/2", ["a:0/2"], b"x" * 3000), 1)
    res = j.add(part("r", "1/2", ["a:1/2"], b"y" * 3000), 2)
    limits = Limits({"results": 5000})
    out = fit_result(limits, "results", res)
    assert out.status == "error" and out.request_id == "r" and out.output == b""
    assert "over the 5000-byte limit of topic results" in out.reason, out.reason
    limits.check("results", b"r", codec.encode("InferenceResult", out, "results"))  # the error itself fits
    assert fit_result(Limits({"results": 100_000}), "results", res) is res


def test_a_joined_result_the_broker_refuses_is_replaced_by_an_error_result():
    """What ``routing.replacement`` builds from a join worker's answer: an error result for the request."""
    from slipstream.agents import routing
    from slipstream.agents.join_worker import _Answer, _Read
    from slipstream.streams.spec import parse_pipeline

    pipe = parse_pipeline({"name": "p", "slo_ms": 10, "hardware": {"cpu-1": {"kind": "cpu", "cost_per_hour": 0.1}},
                           "stages": [{"name": "a", "variants": [{"name": "v", "model": "noop", "accuracy": 1.0}],
                                       "defaults": {"variant": "v", "hardware": "cpu-1"}}]})
    j = Joiner(timeout_ns=T)
    j.add(part("r", "1/2", ["a:0/2"], b"x"), 1)
    res = j.add(part("r", "1/2", ["a:1/2"], b"y"), 2)
    out = routing.Out("results", "r", "InferenceResult", res)
    nxt = routing.replacement(pipe, "join", None, out, _Answer(res, _Read("join", 0, 2, b"")), RuntimeError("refused"))
    assert nxt.record == "InferenceResult" and nxt.value.status == "error" and nxt.value.request_id == "r"
    assert "refused" in nxt.value.reason
