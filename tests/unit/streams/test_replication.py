"""Replication defaults, topic/group prefixes and the local cluster's layout (no broker needed)."""
from __future__ import annotations

import re

import pytest

from slipstream.streams import admin, broker, topics
from slipstream.streams.broker import process
from slipstream.streams.config import KafkaSettings, prefixes_from_env
from slipstream.streams.topics import TopicSpec


@pytest.mark.parametrize("brokers,want", [(1, (1, 1)), (2, (2, 2)), (3, (3, 2)), (5, (3, 2))])
def test_default_replication_is_min_3_brokers_and_min_isr_min_2_rf(brokers, want):
    assert admin.replication(brokers) == want


def test_explicit_replication_is_checked_against_the_cluster():
    assert admin.replication(3, 2) == (2, 2)
    assert admin.replication(3, 3, 1) == (3, 1)
    with pytest.raises(ValueError, match="needs as many live brokers"):
        admin.replication(1, 3)
    with pytest.raises(ValueError, match="min.insync.replicas 3"):
        admin.replication(3, 2, 3)


def test_new_topics_carry_the_min_isr_unless_their_spec_says_otherwise():
    t = admin.new_topic(TopicSpec("x", 4), 3, 2)
    assert (t.num_partitions, t.replication_factor, t.topic_configs) == (4, 3, {"min.insync.replicas": "2"})
    assert admin.new_topic(TopicSpec("y", 1, {"min.insync.replicas": "1"}), 3, 2).topic_configs == \
        {"min.insync.replicas": "1"}


def test_settings_read_replication_from_the_environment():
    s = KafkaSettings.from_env({"SLIPSTREAM_REPLICATION_FACTOR": "3", "SLIPSTREAM_MIN_INSYNC_REPLICAS": "2"})
    assert (s.replication_factor, s.min_insync_replicas) == (3, 2)
    assert KafkaSettings.from_env({}).replication_factor is None
    with pytest.raises(ValueError, match="SLIPSTREAM_REPLICATION_FACTOR must be an integer"):
        KafkaSettings.from_env({"SLIPSTREAM_REPLICATION_FACTOR": "three"})
    with pytest.raises(ValueError, match="min_insync_replicas must be >= 1"):
        KafkaSettings(min_insync_replicas=0)


def test_prefixes_name_every_topic_and_group():
    assert prefixes_from_env({}) == ("slipstream", "slipstream")
    with pytest.raises(ValueError, match="SLIPSTREAM_GROUP_PREFIX"):
        prefixes_from_env({"SLIPSTREAM_GROUP_PREFIX": "a b"})
    try:
        topics.use_prefixes(*prefixes_from_env({"SLIPSTREAM_TOPIC_PREFIX": "acme.ml",
                                                "SLIPSTREAM_GROUP_PREFIX": "acme-ml"}))
        pipe_topics = [t.name for t in topics.all_topics(_Pipe())]
        assert pipe_topics and all(n.startswith("acme.ml.p.") for n in pipe_topics)
        assert topics.consumer_group("p", "s") == "acme-ml-p-s"
    finally:
        topics.use_prefixes()
    assert topics.results("p") == "slipstream.p.results"


class _Stage:
    name = "s"

    class defaults:
        partitions = 2


class _Pipe:
    name = "p"
    stages = [_Stage()]
    max_message_bytes = None


def test_the_cluster_has_its_own_ports_voters_and_folders(tmp_path):
    c = broker.local_cluster(3, "t", state=tmp_path, controllers=0)  # combined: every broker a voter
    single = broker.default_broker()
    ports = [p for n in c.nodes for p in (n.port, n.controller_port)]
    assert ports == list(range(19094, 19100)) and not {single.port, single.controller_port} & set(ports)
    assert len({n.state_dir for n in c.nodes}) == 3 and all(tmp_path in n.state_dir.parents for n in c.nodes)
    cfg = broker.render_config(c.nodes[1])
    assert "node.id=2\n" in cfg and "controller.quorum.voters=1@127.0.0.1:19095,2@127.0.0.1:19097,3@127.0.0.1:19099" in cfg
    assert "process.roles=broker,controller\n" in cfg
    assert "listeners=PLAINTEXT://127.0.0.1:19096,CONTROLLER://127.0.0.1:19097\n" in cfg
    assert "offsets.topic.replication.factor=3\n" in cfg and "min.insync.replicas=2\n" in cfg
    assert "broker.session.timeout.ms=3000\n" in cfg  # a killed broker's leaderships move in 3 s
    assert "auto.leader.rebalance.enable=false\n" in cfg  # and stay put when it is back (no second stall)
    assert not re.search(r"@[A-Z_]+@", cfg)  # every placeholder filled
    one = broker.render_config(single)
    assert "controller.quorum.voters=1@127.0.0.1:19093" in one and "offsets.topic.replication.factor=1\n" in one
    assert "process.roles=broker,controller\n" in one
    assert "broker.session.timeout.ms=9000\n" in one  # Kafka's default: nobody to fail over to
    assert c.bootstrap == "127.0.0.1:19094,127.0.0.1:19096,127.0.0.1:19098"


def test_a_new_cluster_keeps_its_quorum_on_controller_only_nodes(tmp_path):
    """Kafka's production layout: killing a broker never kills the active controller with it."""
    c = broker.local_cluster(3, "t", state=tmp_path)
    assert c.controllers == broker.DEDICATED_CONTROLLERS == 3
    assert [n.roles for n in c.nodes] == ["broker"] * 3 + ["controller"] * 3
    assert c.bootstrap == "127.0.0.1:19094,127.0.0.1:19096,127.0.0.1:19098"  # clients reach brokers only
    voters = "controller.quorum.voters=4@127.0.0.1:19101,5@127.0.0.1:19103,6@127.0.0.1:19105\n"
    brk, ctl = broker.render_config(c.nodes[0]), broker.render_config(c.nodes[4])
    assert voters in brk and voters in ctl and "node.id=5\n" in ctl
    assert "process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:19094\n" in brk
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:19094\n" in brk
    assert "process.roles=controller\nlisteners=CONTROLLER://127.0.0.1:19103\n" in ctl
    assert "advertised.listeners" not in ctl and "inter.broker.listener.name" not in ctl
    assert not re.search(r"@[A-Z_]+@", brk + ctl)


def test_a_cluster_made_before_keeps_its_shape(tmp_path):
    (tmp_path / "cluster.json").write_text('{"brokers": 3, "port": 19094}')  # made before controllers existed
    assert broker.local_cluster(state=tmp_path).controllers == 0
    (tmp_path / "cluster.json").write_text('{"brokers": 3, "port": 19094, "controllers": 3}')
    assert broker.local_cluster(state=tmp_path).controllers == 3
    assert broker.local_cluster(state=tmp_path, controllers=0).controllers == 0  # the caller's word wins


def test_the_single_broker_listens_and_advertises_on_a_given_address(tmp_path):
    """Kubernetes pods on a bridge reach the broker at the bridge's address (deploy/k8s/local-cluster.sh)."""
    b = broker.default_broker(tmp_path, 29092, host="10.88.0.1")
    cfg = broker.render_config(b)
    assert b.bootstrap == "10.88.0.1:29092"
    assert "listeners=PLAINTEXT://10.88.0.1:29092,CONTROLLER://127.0.0.1:29093\n" in cfg
    assert "advertised.listeners=PLAINTEXT://10.88.0.1:29092\n" in cfg
    assert "PLAINTEXT://127.0.0.1" in broker.render_config(broker.default_broker(tmp_path))


def test_cluster_ids_never_start_with_a_dash(monkeypatch):
    """The storage tool reads a leading '-' as an option (a first `kafka up` failed on one)."""
    import uuid as uuid_mod

    ids = iter([uuid_mod.UUID(bytes=b"\xfb" + bytes(15)), uuid_mod.UUID(bytes=bytes(16))])  # '-w...', 'AAA...'
    monkeypatch.setattr(process.uuid, "uuid4", lambda: next(ids))
    assert process._cluster_id() == "A" * 22


RAFT_LOG = [
    "[2026-11-28 22:01:52,946] INFO [RaftManager id=2] Completed transition to Leader(localVoterNode=VoterNode("
    "voterKey=ReplicaKey(id=2, directoryId=Aj), listeners=Endpoints(endpoints={}), supportedKRaftVersion=x), "
    "epoch=1, epochStartOffset=0, highWatermark=Optional.empty, voterStates={}) from CandidateState(localId=2, "
    "epoch=1) (org.apache.kafka.raft.QuorumState)\n",
    "[2026-11-28 22:01:53,298] INFO [RaftManager id=1] Completed transition to FollowerState(fetchTimeoutMs=1000, "
    "epoch=1, leader=2, leaderEndpoints=Endpoints(endpoints={}), votedKey=Optional.empty) from Unattached\n",
    "[2026-11-28 22:03:35,100] INFO [RaftManager id=3] Completed transition to FollowerState(fetchTimeoutMs=1000, "
    "epoch=2, leader=1, leaderEndpoints=Endpoints(endpoints={}), votedKey=Optional.empty) from Candidate\n",
    "[2026-11-28 22:03:35,200] INFO [RaftManager id=1] Completed transition to ProspectiveState(epoch=2, "
    "leaderId=OptionalInt.empty) from FollowerState(fetchTimeoutMs=1000, epoch=2, leader=1)\n",
]


def test_the_active_controller_is_the_leader_of_the_newest_quorum_epoch_in_the_logs():
    assert broker.quorum_leader(RAFT_LOG[:2]) == 2
    assert broker.quorum_leader(RAFT_LOG) == 1  # epoch 2's leader, whatever the lines' order
    assert broker.quorum_leader(reversed(RAFT_LOG)) == 1
    assert broker.quorum_leader(RAFT_LOG[3:]) is None  # a transition that names no leader

