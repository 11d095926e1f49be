"""The fuzz suite against the real broker and real worker processes (``tests/fuzzing.py`` draws the
records with hypothesis from the Avro schemas).

Mutated records of every field of every record type on the pipeline's input, join and control topics,
framing mutations and bad keys, interleaved with valid traffic, all at once into a running fanout3
pipeline (four worker processes). Asserted: every record that can be answered is answered exactly
once (an ``error`` naming the field when it breaks the contract), every other one is dead-lettered
naming the problem, every partition's commit point reaches the end, and no worker process exits.

``SLIPSTREAM_FUZZ_RECORDS`` sets the mutated records per topic (default 300, about a minute): each of
the three topics gets that many, with the valid traffic drawn between them on top;
``SLIPSTREAM_FUZZ_SEED`` the seed. The figures of a run are printed (``-s``) as one JSON line:

    SLIPSTREAM_FUZZ_RECORDS=10000 python -m pytest -s tests/integration/test_fuzz.py
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import time
from pathlib import Path

import pytest

from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.client import request_record
from slipstream.streams.limits import read_limits
from slipstream.streams.spec import load_pipeline
from tests import contract_oracle as oracle, fuzzing

from .helpers import committed_offsets, read_topic
from .workers import Workers, unique_pipeline

FANOUT3 = Path(__file__).parent / "pipelines" / "fanout3.yaml"
RECORDS = int(os.environ.get("SLIPSTREAM_FUZZ_RECORDS", "300"))  # mutated records per topic
SEED = int(os.environ.get("SLIPSTREAM_FUZZ_SEED", "23"))
SLO_MS = 20_000.0  # requests' deadlines; the join times a request out this long after its deadline
FRAGMENT_SLO_MS = 1000.0  # join-topic fragments' deadlines: an incomplete one is answered after 21 s
STAGES = ("pre", "detect", "classify")
# Control-topic mutations (issue 23, part 2; rules in streams/control_rules.py): refused StageConfigs of
# the classify stage and bad keys, interleaved with the rest; asserted through the workers (none exits)
# and the requests after them (all still answered). The TunerHandoff is not read by workers.
CONTROL_STAGE = "classify"


def input_request(pipe):
    return lambda rid: request_record(pipe.name, rid, time.time_ns(), SLO_MS, "application/octet-stream",
                                      f"fuzz-{rid}".encode()).to_dict()


async def produce(kafka, pipe, cases: list[fuzzing.Case]) -> list:
    """Send every case (interleaved as given); returns each one's (partition, offset)."""
    name = {"input": topics.stage_input(pipe.name, pipe.source), "join": topics.join(pipe.name),
            "control": topics.control(pipe.name)}
    prod = kclient.producer(kafka, linger_ms=5)
    await prod.start()
    where = []
    try:
        for start in range(0, len(cases), 500):
            futs = [await prod.send(name[c.topic], c.value, key=c.key) for c in cases[start:start + 500]]
            where += [(m.partition, m.offset) for m in await asyncio.gather(*futs)]
    finally:
        await prod.stop()
    return where


async def commit_stalls(kafka, pipe, timeout_s: float) -> dict:
    """Partitions whose group's committed offset has not reached the end after ``timeout_s``."""
    groups = [(s, topics.stage_input(pipe.name, s)) for s in STAGES] + [("join", topics.join(pipe.name))]
    deadline = time.monotonic() + timeout_s
    while True:
        stalled = {}
        for stage, topic in groups:
            for p, (c, end) in (await committed_offsets(kafka, topics.consumer_group(pipe.name, stage), topic)).items():
                if c != end:
                    stalled[f"{stage}[{p}]"] = (c, end)
        if not stalled or time.monotonic() > deadline:
            return stalled
        await asyncio.sleep(1.0)  # faust commits on its own timer: poll the broker


@pytest.mark.timeout(300 + RECORDS // 5)  # drawing alone is about 10-15 ms a record per topic
async def test_mutated_records_on_every_topic_are_answered_once_or_dead_lettered(kafka, unique, tmp_path):
    t0 = time.monotonic()
    path = unique_pipeline(FANOUT3, unique, tmp_path, slo_ms=SLO_MS)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    limits = await read_limits(kafka, [topics.stage_input(pipe.name, pipe.source), topics.join(pipe.name)])
    # the readers the oracle judges for: the source stage's worker and the join (now_ns: at each case)
    src = oracle.Reader(pipe.name, pipe.slo_ms, len(pipe.stages), limits.of(topics.stage_input(pipe.name, pipe.source)),
                        at_input=True, now_ns=0)
    join = oracle.Reader(pipe.name, pipe.slo_ms, len(pipe.stages), limits.of(topics.join(pipe.name)), at_input=False,
                         now_ns=0)
    workers = Workers(path, kafka.bootstrap)
    try:
        await asyncio.to_thread(workers.start, *STAGES, "join")
        # the inputs last: their times start when they are built, and their deadlines are SLO_MS after
        base = fuzzing.stage_config(pipe, CONTROL_STAGE)
        control = fuzzing.control_cases(pipe.name, CONTROL_STAGE, base, RECORDS, SEED + 2, pipe)
        frags = fuzzing.cases("InferenceResult", "join", fuzzing.fragment_record(pipe.name, FRAGMENT_SLO_MS), join,
                              RECORDS, unique, SEED + 1)
        inputs = fuzzing.cases("InferenceRequest", "input", input_request(pipe), src, RECORDS, unique, SEED)
        cases = [c for trio in itertools.zip_longest(inputs, frags, control) for c in trio if c is not None]
        t_send = time.monotonic()
        where = await produce(kafka, pipe, cases)
        answerable = [c for c in cases if c.expect in ("answer", "error")]
        results = await read_topic(kafka, topics.results(pipe.name), len(answerable), idle_s=8.0, give_up_s=120.0,
                                   short_ok=True)
        dead = await read_topic(kafka, topics.dead_letters(pipe.name), sum(c.expect == "dead" for c in cases),
                                record="DeadLetter", idle_s=2.0, give_up_s=60.0, short_ok=True)
        stalls = await commit_stalls(kafka, pipe, timeout_s=60.0)
        exits = {w.name: w.proc.poll() for w in workers.running if w.proc.poll() is not None}
        crashes = [w.name for w in workers.running if any("We experienced a crash" in ln for ln in w.lines)]
        tails = {w.name: "".join(w.lines[-60:]) for w in workers.running if w.name in exits or w.name in crashes}
    finally:
        await asyncio.to_thread(workers.stop)

    by_id = collections.defaultdict(list)
    for r in results:
        by_id[r["request_id"]].append(r)
    letters = {(d["topic"], d["partition"], d["offset"]): d for d in dead}
    topic_of = {"input": topics.stage_input(pipe.name, pipe.source), "join": topics.join(pipe.name),
                "control": topics.control(pipe.name)}
    problems = []
    for c, (part, off) in zip(cases, where):
        got, letter = by_id.get(c.request_id, []) if c.request_id else [], letters.get((topic_of[c.topic], part, off))
        if c.expect == "answer" and len(got) != 1:
            problems.append((c.topic, c.field, c.request_id, f"{len(got)} results"))
        elif c.expect == "error" and not (len(got) == 1 and got[0]["status"] == "error"
                                          and all(f"{f}=" in got[0]["reason"] for f in c.broken)):
            problems.append((c.topic, c.field, c.request_id, [(r["status"], r["reason"][:200]) for r in got]))
        elif c.expect == "dead" and (letter is None or not letter["error"]
                                     or not all(f"{f}=" in letter["error"] for f in c.broken)):
            problems.append((c.topic, c.field, off, letter and letter["error"][:200]))
    expected_ids = {c.request_id for c in cases if c.request_id}
    twice = {rid: len(rs) for rid, rs in by_id.items() if len(rs) > 1}
    foreign = sorted(set(by_id) - expected_ids)
    figures = {
        "mutated_per_topic_asked": RECORDS, "seed": SEED, "sent": len(cases),
        "sent_per_topic": {t: {"mutated": sum(c.mutated for c in cases if c.topic == t),
                               "valid": sum(not c.mutated for c in cases if c.topic == t)} for t in topic_of},
        "expected": dict(collections.Counter(f"{c.topic}:{c.expect}" for c in cases)),
        "results": len(results), "statuses": dict(collections.Counter(r["status"] for r in results)),
        "dead_letters": len(dead), "answered_twice": len(twice), "foreign": len(foreign),
        "problems": len(problems), "problem_kinds": dict(collections.Counter(f"{p[0]}:{p[1]}" for p in problems)), "stalled_partitions": len(stalls), "worker_exits": len(exits) + len(crashes),
        "send_to_quiet_s": round(time.monotonic() - t_send, 1), "wall_s": round(time.monotonic() - t0, 1),
    }
    print("fuzz figures:", json.dumps(figures))
    assert all(v["mutated"] == RECORDS for v in figures["sent_per_topic"].values()), figures["sent_per_topic"]
    assert not exits and not crashes, (exits, crashes, tails)
    assert not problems, problems[:20]
    assert not twice and not foreign, (twice, foreign[:10])
    assert not stalls, stalls
