"""The result collector: first result wins, duplicates and other runs are counted, not double-counted."""
from dataclasses import replace

from slipstream.loadgen.collect import DUPLICATE, FOREIGN, NEW, Collector, check_exactly_once
from tests.control_records import result


def res(rid, status="done"):
    return result(request_id=rid, status=status)


def test_collects_each_request_once_and_knows_when_complete():
    c = Collector("run7")
    c.expect("run7-00000000")
    c.expect("run7-00000001")
    assert c.offer(res("run7-00000001")) == NEW
    assert c.offer(res("run7-00000001")) == DUPLICATE
    assert c.offer(res("run7-00000001", "dropped")) == DUPLICATE
    assert c.offer(res("run7-00000001", "error")) == DUPLICATE
    assert c.offer(res("run8-00000000")) == FOREIGN
    assert c.offer(res("run70-00000000")) == FOREIGN  # a prefix of another run id is not ours
    assert (c.duplicates, c.conflicting_duplicates, c.foreign) == (3, 2, 2)  # each differs from the first
    assert not c.complete and c.outstanding == 1 and c.missing() == ["run7-00000000"]
    c.finish_sending()
    assert not c.complete
    c.offer(res("run7-00000000", "dropped"))
    assert c.complete and c.missing() == []
    assert [r.request_id for r in c.collected()] == ["run7-00000000", "run7-00000001"]
    assert c.collected()[1].status == "done"  # the first result of a request is kept


def test_result_before_send_is_recorded():
    c = Collector("r")
    assert c.offer(res("r-00000003")) == NEW
    assert c.early == 1 and c.outstanding == 0
    c.expect("r-00000003")
    c.expect("r-00000003")  # recorded twice: still one request
    c.finish_sending()
    assert c.complete and len(c.sent) == 1


def captured_run():
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).parent / "data" / "fanout3_results.json").read_text())
    # captured as result fields and the stages a result passed (no hops)
    return [result(**{k: v for k, v in r.items() if k != "stages"}) for r in doc["results"]], doc["sent"]


def test_a_real_run_is_exactly_once():
    results, sent = captured_run()
    d = check_exactly_once(results, sent)
    assert d.exactly_once and d.sent == 40 and any(r.parts > 1 for r in results)  # joined ones too


def test_the_check_notices_a_duplicate_and_a_lost_result_in_a_real_run():
    results, sent = captured_run()
    dup, lost = results[7], results[12]
    doctored = [r for r in results if r is not lost] + [dup]
    d = check_exactly_once(doctored, sent)
    assert not d.exactly_once
    assert (d.missing, d.duplicates, d.conflicting, d.unexpected) == (
        (lost.request_id,), (dup.request_id,), (), ())
    assert "1 missing" in str(d) and "1 duplicate" in str(d)


def test_the_check_names_conflicting_and_unexpected_results():
    results, sent = captured_run()
    other = replace(results[3], status="dropped")
    d = check_exactly_once(results + [other, res("stranger")], sent)
    assert d.duplicates == (other.request_id,) and d.conflicting == (other.request_id,)
    assert d.unexpected == ("stranger",) and d.missing == ()
