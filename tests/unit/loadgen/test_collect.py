"""The result collector: first result wins, duplicates and other runs are counted, not double-counted."""
from loadgen.collect import DUPLICATE, FOREIGN, NEW, Collector


def res(rid, status="done"):
    return {"request_id": rid, "status": status}


def test_collects_each_request_once_and_knows_when_complete():
    c = Collector("run7")
    c.expect("run7-00000000")
    c.expect("run7-00000001")
    assert c.offer(res("run7-00000001")) == NEW
    assert c.offer(res("run7-00000001")) == DUPLICATE
    assert c.offer(res("run7-00000001", "dropped")) == DUPLICATE
    assert c.offer(res("run8-00000000")) == FOREIGN
    assert c.offer(res("run70-00000000")) == FOREIGN  # a prefix of another run id is not ours
    assert (c.duplicates, c.conflicting_duplicates, c.foreign) == (2, 1, 2)
    assert not c.complete and c.outstanding == 1 and c.missing() == ["run7-00000000"]
    c.finish_sending()
    assert not c.complete
    c.offer(res("run7-00000000", "dropped"))
    assert c.complete and c.missing() == []
    assert [r["request_id"] for r in c.collected()] == ["run7-00000000", "run7-00000001"]
    assert c.collected()[1]["status"] == "done"  # the first result of a request is kept


def test_result_before_send_is_recorded():
    c = Collector("r")
    assert c.offer(res("r-00000003")) == NEW
    assert c.early == 1 and c.outstanding == 0
    c.expect("r-00000003")
    c.expect("r-00000003")  # recorded twice: still one request
    c.finish_sending()
    assert c.complete and len(c.sent) == 1
