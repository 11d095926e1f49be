"""The bulk intake's pure part: which records of a fetch go to a reader, in one call per partition."""
from types import SimpleNamespace

from aiokafka import TopicPartition

from slipstream.agents.intake import fresh, split_fetch


def recs(*offsets):
    return [SimpleNamespace(offset=o) for o in offsets]


def test_fresh_keeps_records_from_the_read_offset_on():
    rs = recs(5, 6, 7)
    assert fresh(rs, None) is rs and fresh(rs, 5) is rs  # faust delivers offset >= its read offset
    assert [r.offset for r in fresh(rs, 6)] == [6, 7]
    assert fresh(rs, 9) == [] and fresh([], 3) == []


def test_split_fetch_hands_each_partition_of_a_read_topic_to_its_reader_once():
    reader = object()
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    fetch = {a0: recs(3, 4), a1: recs(8, 9), b0: recs(1)}
    read = {a0: 4, a1: None, b0: None}
    bulk, rest = split_fetch(fetch, None, set(), read.get, {"a": reader}.get)
    assert [(r, tp, [x.offset for x in xs]) for r, tp, xs in bulk] == [(reader, a0, [4]), (reader, a1, [8, 9])]
    assert rest == {b0: fetch[b0]}  # no reader: faust's per-message path


def test_split_fetch_skips_inactive_partitions_unless_buffered_and_empty_remainders():
    reader = object()
    a0, a1, a2 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2)
    fetch = {a0: recs(1), a1: recs(2), a2: recs(3)}
    bulk, rest = split_fetch(fetch, {a0}, {a1}, {a2: 0}.get, {"a": reader}.get)
    assert [tp for _, tp, _ in bulk] == [a0, a1] and rest == {}
    bulk, _ = split_fetch({a0: recs(1, 2)}, None, set(), {a0: 5}.get, {"a": reader}.get)
    assert bulk == []  # everything behind the read offset (prefetched before a seek back)
