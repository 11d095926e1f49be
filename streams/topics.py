"""Topic names and configs: pure functions of (pipeline, stage). No other module spells a topic name.

    slipstream.<pipeline>.<stage>.in   a stage's input (the source stage's is the pipeline input topic)
    slipstream.<pipeline>.join         fan-out fragments on their way to being joined into one result
    slipstream.<pipeline>.results      InferenceResult, keyed by request id
    slipstream.<pipeline>.control      StageConfig, keyed by stage, compacted (latest config per stage)
    slipstream.<pipeline>.scaling      ScalingAction history (tuner decisions), time-retained
    slipstream.<pipeline>.dlq          DeadLetter: records a stage could not decode or accept

``slipstream`` is the default topic prefix and consumer-group prefix; a process sets its own once at
start (:func:`use_prefixes`; the CLI does, from ``SLIPSTREAM_TOPIC_PREFIX``/``SLIPSTREAM_GROUP_PREFIX``)
so several deployments, or a cluster whose ACLs grant a prefix, can share one Kafka.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .config import DEFAULT_PREFIX

_prefix = {"topic": DEFAULT_PREFIX, "group": DEFAULT_PREFIX}


def use_prefixes(topic_prefix: str = DEFAULT_PREFIX, group_prefix: str = DEFAULT_PREFIX) -> None:
    """Set this process's topic and consumer-group prefixes (once, at the edge, before any name is made)."""
    _prefix.update(topic=topic_prefix, group=group_prefix)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


def stage_input(pipeline: str, stage: str) -> str:
    return f"{_prefix['topic']}.{pipeline}.{stage}.in"


def join(pipeline: str) -> str:
    return f"{_prefix['topic']}.{pipeline}.join"


def results(pipeline: str) -> str:
    return f"{_prefix['topic']}.{pipeline}.results"


def control(pipeline: str) -> str:
    return f"{_prefix['topic']}.{pipeline}.control"


HANDOFF_KEY = "~handoff"  # the planner's TunerHandoff on the control topic (no stage name has a '~')


def scaling(pipeline: str) -> str:
    return f"{_prefix['topic']}.{pipeline}.scaling"


def dead_letters(pipeline: str) -> str:
    return f"{_prefix['topic']}.{pipeline}.dlq"


def consumer_group(pipeline: str, stage: str) -> str:
    """Each stage is its own consumer group (and its own faust app id)."""
    return f"{_prefix['group']}-{pipeline}-{stage}"


COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "segment.ms": "60000"}


def all_topics(pipe) -> list[TopicSpec]:
    """Every topic a pipeline needs, with partitions from the stage defaults; each takes records up to
    the spec's ``max_message_bytes`` when it sets one (else the broker's default)."""
    size = {} if pipe.max_message_bytes is None else {"max.message.bytes": str(pipe.max_message_bytes)}
    out = [TopicSpec(stage_input(pipe.name, s.name), s.defaults.partitions, size) for s in pipe.stages]
    widest = max(s.defaults.partitions for s in pipe.stages)
    out += [
        TopicSpec(join(pipe.name), widest, size),
        TopicSpec(results(pipe.name), widest, size),
        TopicSpec(control(pipe.name), 1, {**COMPACTED, **size}),
        TopicSpec(scaling(pipe.name), 1, size),
        TopicSpec(dead_letters(pipe.name), 1, size),
    ]
    return out
