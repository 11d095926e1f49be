"""The local three-broker cluster (`slipstream kafka up --brokers 3`, its quorum on three controller-only
nodes): topics get replication 3 and min ISR 2 by default, and with one broker killed (never a voter)
an idempotent acks=all producer still writes, nothing lost and nothing doubled; restarted, the killed node answers, lists all brokers and is back in the
in-sync replica set of every partition it holds. Starts and stops its own cluster (state in a temporary
folder)."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from slipstream.streams import admin, broker, kafka as kclient
from slipstream.streams.config import KafkaSettings
from slipstream.streams.topics import TopicSpec

from .helpers import drain


@pytest.fixture
def cluster(tmp_path):
    c = broker.local_cluster(3, "test", state=tmp_path / "cluster")
    try:
        broker.cluster_up(c, progress=lambda _: None)
        yield c
    finally:
        broker.cluster_down(c, progress=lambda _: None)
    assert all(broker.running_pid(n) is None for n in c.nodes)


async def test_replicated_topics_survive_one_broker_killed(cluster, unique):
    settings = KafkaSettings(bootstrap=cluster.bootstrap)
    topic = f"{unique}.replicated"
    assert await admin.ensure_topics(settings, [TopicSpec(topic, 2)]) == [topic]
    async with admin.admin_client(settings) as a:
        for _ in range(50):  # another broker may not have the new topic's metadata yet: bounded poll
            (meta,) = await a.describe_topics([topic])
            if meta["partitions"]:
                break
            await asyncio.sleep(0.1)
        assert sorted(len(p["replicas"]) for p in meta["partitions"]) == [3, 3]
        for _ in range(50):  # the broker asked may not know the topic yet either (no configs): bounded poll
            (cfg,) = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                              {"min.insync.replicas": None})])
            configs = {c[0]: c[1] for c in cfg.resources[0][4]}
            if configs:
                break
            await asyncio.sleep(0.1)
        assert configs["min.insync.replicas"] == "2"
        leaders = [p["leader"] for p in meta["partitions"]]
    victim = cluster.nodes[leaders[0] - 1]
    assert victim.is_broker and not victim.is_voter  # killing a broker leaves the quorum whole
    assert broker.active_controller(cluster) in {n.node_id for n in cluster.voter_nodes} - {victim.node_id}
    os.kill(broker.running_pid(victim), signal.SIGKILL)  # the leader of partition 0
    prod = kclient.producer(settings, request_timeout_ms=30000)
    await prod.start()
    try:
        futs = [await prod.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(60)]
        await asyncio.wait_for(asyncio.gather(*futs), 60)
    finally:
        await prod.stop()
    got = await drain(settings, topic, 60, timeout_s=60)
    assert sorted(m.value for m in got) == sorted(f"v{i}".encode() for i in range(60))
    cons = kclient.consumer(settings, group_id=None)
    await cons.start()
    try:
        ends = await cons.end_offsets(await kclient.topic_partitions(cons, topic))
    finally:
        await cons.stop()
    assert sum(ends.values()) == 60  # no record stored twice
    await asyncio.to_thread(broker.start_node, cluster, victim.node_id)
    await asyncio.to_thread(broker.wait_in_sync, cluster, victim.node_id, 120.0)
    async with admin.admin_client(settings) as a:
        for _ in range(100):  # each request asks a random broker, whose metadata cache may lag the one
            (meta,) = await a.describe_topics([topic])  # wait_in_sync asked: bounded poll
            if all(victim.node_id in p["isr"] for p in meta["partitions"]):
                break
            await asyncio.sleep(0.1)
    assert all(victim.node_id in p["isr"] for p in meta["partitions"])
