"""The estimator: a discrete-event simulator of exactly what the stage agents do.

``simulate`` replays an arrival trace through a plan and returns per-request results
(:class:`~slipstream.planner.results.SimResult`). The agent algorithm is the one documented at the top of
``streams/batching.py``; the simulator calls its functions (``ready``, ``window_size``, ``decide``,
``flush_due_ns``), it does not re-implement them. The parts, each in its own module of
``slipstream.planner.sim``:

- ``engine``: the event loop, simpy's core shape: a heap keyed ``(time_ns, priority, seq)`` in integer
  nanoseconds (the producers' clock);
- ``servers``: a consumer's FIFO queue (``Queue``) and the model threads taking windows from it
  (``Server``);
- ``groups``: a stage's replica group, in ``in-worker`` mode (one queue, c servers; scaling never
  pauses) or ``rebalance`` mode (a queue per replica by Kafka's range assignor; scaling pauses all); a
  mixed stage's is the pool it is deployed as (the primary's hardware and batching, windows split by
  variant with the workers' rule, ``slipstream.streams.shares``);
- ``host``: where batches run: at full speed, or processor-shared over a host's free cores;
- ``stages``: fan-out and branches; ``world``: the shared context and the builder;
- ``record``: the log of the run and the ``SimResult`` computed from it (join, residence, drops);
- ``gate``: the source stage's admission, the workers' own (``slipstream.streams.shedding``): expired and shed
  arrivals never enter the source's queue;
- ``params``: the frozen, validated parameters (``ReplicaChange``, ``Transit``, ``Network``,
  ``HostModel``, ``ServiceTime``).

docs/planner.md ("What the estimator models") lists every effect and its parameter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..schemas.records import TunerHandoff
from ..streams.contract import deadline_ns as request_deadline
from .plan import Plan
from .problem import Problem
from .results import QueryResult, SimResult, nearest_rank  # noqa: F401  (re-exported)
from .sim import gate, stagewise
from .sim.engine import CHANGE
from .sim.groups import range_assign  # noqa: F401  (re-exported)
from .sim.params import (IN_WORKER, BatchingChange, HostModel, Network, ReplicaChange,  # noqa: F401
                                ServiceTime, ShareChange, Transit, scaling_modes)
from .sim.record import after_hop, finish_ns, to_result
from .sim.world import Unprofiled, World, build  # noqa: F401  (Unprofiled re-exported)

NS_PER_S = 1_000_000_000
FANOUT_DISTS = ("round", "poisson")
METHODS = ("auto", "events")


def network_for(problem: Problem, network: Network | None = None, hop_ms: float | None = None) -> Network:
    """The Kafka transits a simulation uses: ``network``; else a constant ``hop_ms`` on every hop; else
    the problem's network (a calibration's); else the problem's ``hop_ms`` on every hop."""
    if network is not None:
        return network
    if hop_ms is None and problem.network is not None:
        return problem.network
    return Network.every_hop(Transit.constant(problem.hop_ms if hop_ms is None else hop_ms))


@dataclass(frozen=True)
class SimOptions:
    """How to run one simulation. What is simulated (the pipeline, its arrivals, seed, activation time,
    Kafka transits, service spread and host) is the :class:`~slipstream.planner.problem.Problem`'s: to change it,
    ``dataclasses.replace`` the problem.

    ``schedule`` is the tuner's replica and share changes and the re-plans' batching changes; ``scaling`` is
    ``in-worker`` or ``rebalance``, for all stages or per stage; ``pause_s`` the rebalance pause
    (default: the problem's ``activation_s``); ``in_worker_activation_s`` how long after its change an
    added replica serves (``in-worker``; default: the problem's ``activation_s``, a model load;
    a worker holding loaded spare replicas, ``slipstream.agents.stage.pool.SpareReplicas``, serves it once the control record is
    in); ``fanout_dist`` how many children a request has
    (``round``: the fan-out rounded, ``poisson``); ``drop_late`` whether the workers drop requests past
    their deadline; ``method`` ``auto`` runs stage by stage when nothing couples the stages in time
    (``slipstream.planner.sim.stagewise``, same result, faster), ``events`` always runs the event loop;
    ``request_ids`` (default ``"0"``, ``"1"``, ... in arrival order) are what a mixed stage routes by;
    ``handoff`` is the TunerHandoff record the planner publishes for the plan
    (``slipstream.planner.service.handoff_record``): with it the source stage sheds as its workers do
    (``slipstream.planner.sim.gate``), at the capacity that record and the replicas in force give; without it
    nothing is shed at the source (a worker that has read no hand-off sheds nothing either).
    """

    schedule: Sequence[ReplicaChange | BatchingChange | ShareChange] = ()
    scaling: str | Mapping[str, str] = IN_WORKER
    pause_s: float | None = None
    in_worker_activation_s: float | None = None
    fanout_dist: str = "round"
    drop_late: bool = True
    method: str = "auto"
    request_ids: Sequence[str] | None = None
    handoff: TunerHandoff | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.fanout_dist not in FANOUT_DISTS:
            raise ValueError(f"fanout_dist must be one of {FANOUT_DISTS}, got {self.fanout_dist!r}")
        for name in ("pause_s", "in_worker_activation_s"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")


def simulate(problem: Problem, plan: Plan, options: SimOptions = SimOptions()) -> SimResult:
    """Replay the problem's arrivals (``problem.arrivals_s``, seconds) through ``plan``, with the
    problem's seed, activation time, network (a calibration's; else its ``hop_ms`` on every hop),
    service spread and host; ``options`` says how (:class:`SimOptions`)."""
    if not problem.activation_s >= 0:
        raise ValueError(f"activation_s must be >= 0, got {problem.activation_s!r}")
    o, act_s = options, problem.activation_s
    network, service, host = network_for(problem), problem.service, problem.host
    names = problem.topo_order
    modes = scaling_modes(o.scaling, names)
    arr = np.sort(np.asarray(problem.arrivals_s, dtype=float))
    arr_ns = (arr * NS_PER_S).astype(np.int64)
    deadline_ns = request_deadline(arr_ns, problem.slo_ms)
    if o.request_ids is not None and len(o.request_ids) != arr.size:
        raise ValueError(f"{len(o.request_ids)} request_ids for {arr.size} arrivals")

    in_worker_s = act_s if o.in_worker_activation_s is None else o.in_worker_activation_s
    world = World(seed=problem.seed, deadline=deadline_ns.tolist(), host=host,
                  network=network, service=service, activation_ns=int(act_s * NS_PER_S),
                  in_worker_activation_ns=int(in_worker_s * NS_PER_S),
                  pause_ns=int((act_s if o.pause_s is None else o.pause_s) * NS_PER_S), fanout_dist=o.fanout_dist,
                  request_ids=o.request_ids)
    stages = build(problem, plan, world, modes, o.drop_late)
    vis = _ingress(world, arr_ns)
    keep = _admitted(world, stages[0], plan, o, vis, deadline_ns)
    reqs, vis_in, sent = np.flatnonzero(keep), vis[keep], arr_ns[keep]
    if o.method == "auto" and stagewise.applies(host=host, schedule=o.schedule, service=service, network=network):
        stagewise.run(world, stages, reqs, vis_in, sent)
    else:
        stages[0].group.seed(reqs, vis_in, sent)
        world.colocate(sent.tolist())  # what the gate refused was judged from its header: no request CPU
        for c in sorted(o.schedule, key=lambda c: c.time_s):
            world.engine.at(int(c.time_s * NS_PER_S), CHANGE, _group_of(stages, c), c)
        world.engine.run()
    fetch = [world.fetch_cadence(), world.fetch_cadence()]  # the join's and the client's consumers
    finish = finish_ns(world.log, int(arr.size), network, fetch, world.net_rng)
    return to_result(world.log, slo_ms=problem.slo_ms, names=names, arrival_s=arr, arrival_ns=arr_ns,
                     deadline_ns=deadline_ns, finish=finish, events=world.engine.events)


def _admitted(world: World, source, plan: Plan, o: SimOptions, vis: np.ndarray, deadline_ns: np.ndarray) -> np.ndarray:
    """Which arrivals the source stage's gate lets through (``slipstream.planner.sim.gate``; all without a
    hand-off or with late requests kept); the others are logged as dropped there."""
    keep = np.ones(vis.size, dtype=bool)
    if o.handoff is None or not o.drop_late:
        return keep
    serve_ns = source.group.predict(1)
    for i, why in gate.judge_arrivals(source.name, vis, deadline_ns, serve_ns,
                                      gate.capacity_steps(o.handoff, plan, o.schedule)):
        keep[i] = False
        world.log.refuse(i, source.index, int(vis[i]), serve_ns, shed=why.startswith("shed"))
    return keep


def _ingress(world: World, arr_ns: np.ndarray) -> np.ndarray:
    """The client's requests, produced at their arrival: when each is fetchable at the source (the
    source's consumers apply their own fetch cadence)."""
    return after_hop(arr_ns, world.network.ingress, None, world.net_rng)


def _group_of(stages: list, c: ReplicaChange | BatchingChange | ShareChange):
    by_name = {st.name: st for st in stages}
    if isinstance(c, (BatchingChange, ShareChange)):
        if c.stage not in by_name:
            raise ValueError(f"{type(c).__name__} names no stage of the plan: {c.stage!r} (stages {list(by_name)})")
        return by_name[c.stage].group
    if c.stage not in by_name or c.index >= len(by_name[c.stage].group.counts):
        raise ValueError(f"ReplicaChange names no assignment of the plan: stage {c.stage!r}, index {c.index} "
                         f"(stages {list(by_name)})")
    return by_name[c.stage].group
