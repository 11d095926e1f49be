"""`slipstream bench scaling`: the wait a scale event adds for the replicas already serving."""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path

import click

from slipstream.streams.config import KafkaSettings


@click.command("scaling")
@click.option("--rounds", default=3, show_default=True, help="Rounds per deployment (medians reported).")
@click.option("--rate", "rate_qps", default=40.0, show_default=True, help="Open-loop Poisson rate (req/s).")
@click.option("--step-s", default=15.0, show_default=True,
              help="Seconds between scale events; the last third before an event is its 'before'.")
@click.option("--width", default=512, show_default=True, help="Synthetic MLP width (service time).")
@click.option("--modes", default="in-worker,processes", show_default=True,
              help="in-worker: replicas inside one worker; processes: one worker per replica (baseline).")
@click.option("--out", "out_dir", default="reports/bench-scaling", show_default=True,
              help="Where the JSON, the table and the plot go.")
def scaling_bench(rounds, rate_qps, step_s, width, modes, out_dir) -> None:
    """Scale a stage 1->2->4->2->1 and switch its variant under load; per event, the extra queue wait
    of the replicas already serving, the new capacity's first request, and where the time went."""
    from slipstream.loadgen.bench import scaling as bench_scaling

    modes_t = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in modes_t if m not in bench_scaling.MODES]
    if bad:
        raise click.BadParameter(f"unknown mode(s) {bad}; choose from {sorted(bench_scaling.MODES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        res = bench_scaling.run(KafkaSettings.from_env(), Path(tmp), rounds=rounds, rate_qps=rate_qps,
                                step_s=step_s, width=width, modes=modes_t,
                                progress=lambda m: click.echo(m, err=True))
    (out / "scaling.json").write_text(json.dumps({m: [[asdict(e) for e in r] for r in rs]
                                                  for m, rs in res.items()}, indent=2))
    table = format_table(res)
    (out / "scaling.txt").write_text(table + "\n")
    plot(res, out / "scaling.png")
    click.echo(table)
    click.echo(f"\n{out}/scaling.json, scaling.txt, scaling.png")


def _med(values) -> float:
    v = [x for x in values if x is not None and not math.isnan(x)]
    return statistics.median(v) if v else math.nan


def format_table(res) -> str:
    lines = ["extra queue wait of the replicas already serving: the step after each event vs the settled "
             "last third of the step before it (median of rounds; every round's extra p99 in brackets); "
             "first serve: a new replica's first request", ""]
    head = f"{'deployment':<10} {'event':<22} {'p99 before':>10} {'p99 after':>10} {'extra p99':>10} " \
           f"{'extra max':>10} {'first serve':>11}  rounds' extra p99 (ms)"
    lines += [head, "-" * len(head)]
    for mode, rounds in res.items():
        for i, ev in enumerate(rounds[0]):
            same = [r[i] for r in rounds if len(r) > i]
            fs = _med([e.first_serve_s for e in same])
            lines.append(f"{mode:<10} {ev.label:<22} {_med([e.wait_before_ms[1] for e in same]):>8.1f}ms "
                         f"{_med([e.wait_after_ms[1] for e in same]):>8.1f}ms "
                         f"{_med([e.extra_p99_ms for e in same]):>8.1f}ms "
                         f"{_med([e.extra_max_ms for e in same]):>8.1f}ms "
                         f"{'-' if math.isnan(fs) else f'{fs:.2f} s':>11}  "
                         f"[{', '.join(f'{e.extra_p99_ms:.0f}' for e in same)}]")
    lines += ["", "where the time went (median ms per phase)"]
    for mode, rounds in res.items():
        for i, ev in enumerate(rounds[0]):
            same = [r[i] for r in rounds if len(r) > i]
            keys = sorted({k for e in same for k in e.breakdown_ms})
            parts = ", ".join(f"{k} {_med([e.breakdown_ms.get(k) for e in same]):.0f}" for k in keys)
            lines.append(f"{mode:<10} {ev.label:<22} {parts or '-'}")
    return "\n".join(lines)


def plot(res, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [e.label for e in next(iter(res.values()))[0]]
    width = 0.8 / max(len(res), 1)
    for k, (mode, rounds) in enumerate(res.items()):
        vals = [_med([r[i].extra_p99_ms for r in rounds if len(r) > i]) for i in range(len(labels))]
        ax.bar([i + k * width for i in range(len(labels))], vals, width, label=mode)
    ax.axhline(250, color="red", linestyle="--", linewidth=1, label="budget 250 ms")
    ax.set_xticks([i + width * (len(res) - 1) / 2 for i in range(len(labels))], labels, rotation=15)
    ax.set_ylabel("extra p99 queue wait of running replicas (ms)")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_title("What a scale event costs the replicas already serving")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
