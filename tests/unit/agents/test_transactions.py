"""The pure parts of exactly-once delivery: transactional ids, the processing switch, and what follows
a failed transaction attempt (``slipstream.agents.transactions.decide``)."""
import pytest

from slipstream.agents.transactions import (ABORT, COMMIT, MAX_ATTEMPTS, REREAD, RETRY, SEND, STOP, decide,
                                 transactional_id)
from slipstream.streams import topics
from slipstream.streams.config import AT_LEAST_ONCE, DEFAULT_PROCESSING, EXACTLY_ONCE, KafkaSettings


def test_transactional_id_is_one_per_input_partition_and_the_same_for_every_owner():
    group = topics.consumer_group("p", "detect")
    a = transactional_id(group, topics.stage_input("p", "detect"), 0)
    assert a == transactional_id(group, topics.stage_input("p", "detect"), 0)  # a restart fences its zombie
    assert a != transactional_id(group, topics.stage_input("p", "detect"), 1)
    assert a != transactional_id(topics.consumer_group("p", "classify"), topics.stage_input("p", "detect"), 0)


def test_processing_switch_from_the_environment():
    assert KafkaSettings.from_env({}).processing == DEFAULT_PROCESSING
    assert KafkaSettings.from_env({"SLIPSTREAM_PROCESSING": "exactly-once"}).exactly_once
    assert not KafkaSettings.from_env({"SLIPSTREAM_PROCESSING": AT_LEAST_ONCE}).exactly_once
    assert KafkaSettings(processing=EXACTLY_ONCE).exactly_once
    with pytest.raises(ValueError, match="processing must be one of exactly-once, at-least-once"):
        KafkaSettings.from_env({"SLIPSTREAM_PROCESSING": "exactly_once"})


def test_a_fenced_producer_stops_wherever_it_failed():
    for phase in (SEND, COMMIT, ABORT):
        for attempts in (1, MAX_ATTEMPTS, MAX_ATTEMPTS + 3):
            assert decide(True, phase, attempts) == STOP


def test_a_failure_before_the_commit_is_retried_then_the_partition_is_read_again():
    assert [decide(False, SEND, a) for a in range(1, MAX_ATTEMPTS + 2)] == [RETRY] * (MAX_ATTEMPTS - 1) + [REREAD] * 2


def test_a_failed_commit_or_abort_reads_the_partition_again_at_once():
    # the commit's outcome is unknown: the records in memory may not be sent again
    assert decide(False, COMMIT, 1) == REREAD
    # an abort that failed leaves the producer unusable (aiokafka's fatal state) or unanswered
    assert decide(False, ABORT, 1) == REREAD


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown transaction phase 'flush'"):
        decide(False, "flush", 1)


def test_only_the_brokers_fencing_answer_counts_as_fencing():
    from aiokafka.errors import (InvalidProducerEpoch, KafkaError, MessageSizeTooLargeError,
                                 OutOfOrderSequenceNumber, ProducerFenced)

    from slipstream.streams import kafka as kclient

    assert kclient.is_fenced(ProducerFenced()) and kclient.is_fenced(InvalidProducerEpoch())
    for exc in (KafkaError("Unexpected error during batch delivery"), OutOfOrderSequenceNumber(),
                MessageSizeTooLargeError(), TimeoutError(), AssertionError("Invalid state transition")):
        assert not kclient.is_fenced(exc), exc
    assert kclient.is_out_of_order(OutOfOrderSequenceNumber()) and not kclient.is_out_of_order(ProducerFenced())


def unreachable_transactions(**kw):
    """PartitionTransactions on a port nothing listens on: every producer start is refused at once."""
    import socket

    import slipstream.agents.transactions as txn
    from slipstream.streams.spec import parse_pipeline

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pipe = parse_pipeline({"name": "p", "slo_ms": 100, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1,
                           "cost_per_hour": 0.05}}, "stages": [{"name": "s", "variants": [
                           {"name": "v", "model": "noop", "accuracy": 1.0}]}], "edges": []})
    return txn.PartitionTransactions(KafkaSettings(bootstrap=f"127.0.0.1:{port}", processing=EXACTLY_ONCE),
                                     "g", pipe, "s", **kw)


async def test_a_producer_that_cannot_start_is_tried_a_bounded_number_of_times_then_reported(monkeypatch):
    import asyncio

    import slipstream.agents.transactions as txn

    monkeypatch.setattr(txn, "START_TRIES", 2)
    txns = unreachable_transactions(max_backoff_s=0.1)
    stuck: list[str] = []
    txns.on_stuck = stuck.append
    await asyncio.wait_for(txns.open([("t", 0)]), 10)
    assert len(stuck) == 1 and "t[0] not started in 2 tries" in stuck[0], stuck
    (fut,) = txns.submit([txn.Release(("t", 0), [], [], 1)])  # nothing of the partition commits here
    assert fut.result() is False


async def test_a_partition_revoked_while_its_producer_starts_is_not_kept_nor_reported_stuck(monkeypatch):
    """A start still retrying when its partition is revoked would fence the next owner's producer
    when it finally succeeds: the revocation cancels it."""
    import asyncio

    import slipstream.agents.transactions as txn

    monkeypatch.setattr(txn, "START_TRIES", 50)  # minutes of retries unless cancelled
    created = asyncio.Event()
    make = txn.kclient.transactional_producer
    monkeypatch.setattr(txn.kclient, "transactional_producer", lambda *a, **kw: (created.set(), make(*a, **kw))[1])
    txns = unreachable_transactions(max_backoff_s=1.0)
    stuck: list[str] = []
    txns.on_stuck = stuck.append
    opening = asyncio.ensure_future(txns.open([("t", 0)]))
    await asyncio.wait_for(created.wait(), 10)
    await asyncio.wait_for(txns.close([("t", 0)]), 10)
    await asyncio.wait_for(opening, 10)  # the start was cancelled, not left retrying
    assert stuck == []
    (fut,) = txns.submit([txn.Release(("t", 0), [], [], 1)])
    assert fut.result() is False  # no producer of the revoked partition here
