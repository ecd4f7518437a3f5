"""Simulated steps per wall second of numerics-free runs, and what the loop's cost grows with.

    python bench/numerics_free.py            # everything (~3-5 min here)
    python bench/numerics_free.py --quick    # the headline only

LLaMA-7B on hardware=a100_32 (ZeRO-1), 32 x 256 tokens per worker, 60,000 steps (the paper's
step count), MeCeFO under failure=high. Every number is the wall time of the loop
(`Experiment.train`; setup, the FLOP count and the record's last summary are excluded and
printed apart), measured in this process:

1. the headline: the event-driven loop against the step-by-step one (trainer.event_driven=false)
   on the same run, steps per wall second of each and their ratio; target >= 1,000,000 steps/s;
2. failure-free, LLaMA-1B, 20,000 steps: steps per wall second; target >= 1,000,000;
   every method at 512, 4,096, 16,384 and 65,536 workers, 200 steps under failure=high per worker
   (the events grow with the cluster): steps per wall second and microseconds per event, and the
   per-event cost at 65,536 against 512 (target: within 2x; a plan names only the workers that
   differ, so an event's cost must not grow with the workers);
3. events: the failure rate x1/16 .. x16 at 32 workers (the loop's cost follows the events), and
   the steps x1/10 .. x10 at a fixed number of failures (Oobleck, which has no periodic action of its
   own; paper time scaled: one paper hour is the run's failure-free duration / cluster.paper_run_h),
   where the cost must not follow the steps.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from mecefo_exp import api  # noqa: E402
from mecefo_exp.methods import REGISTRY  # noqa: E402
from mecefo_exp.run.experiment import Experiment  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMON = [
    "model=llama_7b",
    "hardware=a100_32",
    "hardware.shard=optimizer",
    "trainer.numerics=false",
    "cluster.n_workers=32",
    "data.micro_batch=32",
    "data.seq_len=256",
    "trainer.max_steps=60000",
    "trainer.warmup_steps=6000",
    "trainer.eval_every=0",
    "trainer.progress=none",
    "trainer.log_events=0",
    "method=mecefo",
    "failure=high",
]
TARGET = 1_000_000


# the cost-per-event sweep: the failure rate is per worker, so a larger cluster has more events
SIZE_COMMON = [
    "model=llama_7b",
    "hardware=a100_32",
    "trainer.numerics=false",
    "trainer.eval_every=0",
    "trainer.progress=none",
    "trainer.log_events=0",
    "failure=high",
]


def timed_run(overrides, common=COMMON):
    """(summary, loop wall s, whole run wall s, events written)."""
    cfg = api.compose(common + overrides)
    with tempfile.TemporaryDirectory() as d:
        exp = Experiment(cfg, Path(d))
        loop, train = [], exp.train

        def timed_train():
            t0 = time.perf_counter()
            train()
            loop.append(time.perf_counter() - t0)

        exp.train = timed_train
        t0 = time.perf_counter()
        summary = exp.run()
        whole = time.perf_counter() - t0
        events = sum(1 for _ in open(Path(d) / "events.jsonl"))
    return summary, loop[0], whole, events


def headline():
    timed_run(["trainer.max_steps=600"])  # warm: imports, the FLOP count's cache
    s_step, w_step, _, ev_step = timed_run(["trainer.event_driven=false"])
    s_ev, w_ev, whole, ev = timed_run([])
    assert ev == ev_step and s_ev["steps"] == s_step["steps"] and s_ev["failures"] == s_step["failures"]
    rel = abs(s_ev["sim_time_s"] - s_step["sim_time_s"]) / s_step["sim_time_s"]
    rate, rate_step = s_ev["steps"] / w_ev, s_step["steps"] / w_step
    print(f"7B, 60,000 steps, MeCeFO, failure=high, 32 workers ({ev} events, {s_ev['failures']} failures):")
    print(
        f"  event-driven loop {w_ev * 1e3:.0f} ms = {rate:,.0f} steps/s; step by step {w_step:.2f} s = "
        f"{rate_step:,.0f} steps/s; ratio {rate / rate_step:.0f}x; simulated time equal within {rel:.1e}"
    )
    print(
        f"  whole run (setup, FLOP cache hit, record) {whole:.2f} s; target >= {TARGET:,} steps/s in the loop: "
        f"{'met' if rate >= TARGET else 'MISSED'}"
    )
    return {"steps_per_s": rate, "step_by_step_steps_per_s": rate_step, "events": ev}


def failure_free():
    """LLaMA-1B on a100_32 without failures, the paper's 20,000 steps: target >= 1,000,000 steps/s."""
    s, loop, whole, ev = timed_run(
        ["trainer.max_steps=20000", "trainer.warmup_steps=2000"],
        common=SIZE_COMMON[:1] + ["model=llama_1b"] + SIZE_COMMON[1:-1] + ["failure=none"],
    )
    rate = s["steps"] / loop
    print(
        f"\n1B, 20,000 steps, no failures: loop {loop * 1e3:.1f} ms = {rate:,.0f} steps/s; target >= {TARGET:,}: "
        f"{'met' if rate >= TARGET else 'MISSED'}"
    )
    return rate


def table(title, header, rows):
    print(f"\n{title}\n| {' | '.join(header)} |\n|{'---|' * len(header)}")
    for r in rows:
        print(f"| {' | '.join(r)} |")


SIZES = (512, 4096, 16384, 65536)
METHODS = tuple(REGISTRY)


def methods_by_size():
    """Every method at 512 .. 65,536 workers under failure=high per worker (events grow with the
    cluster): steps per wall second and microseconds per event; the per-event cost must not grow
    with the workers (target: within 2x of that at 512 at the largest size)."""
    rows, ratios = [], {}
    for method in METHODS:
        per_event = {}
        for n in SIZES:
            s, loop, whole, ev = timed_run(
                [f"method={method}", f"cluster.n_workers={n}", "trainer.max_steps=200", "trainer.warmup_steps=20"],
                common=SIZE_COMMON,
            )
            per_event[n] = loop / max(ev, 1)
            rows.append(
                [
                    method,
                    f"{n:,}",
                    f"{ev:,}",
                    f"{s['failures']:,}",
                    f"{loop:.3f}",
                    f"{s['steps'] / loop:,.0f}",
                    f"{per_event[n] * 1e6:.0f}",
                ]
            )
        ratios[method] = per_event[SIZES[-1]] / per_event[SIZES[0]]
    table(
        "every method against workers (LLaMA-7B, a100_32, 200 steps, failure=high per worker)",
        ["method", "workers", "events", "failures", "loop s", "steps/s", "us per event"],
        rows,
    )
    print(
        "per-event cost at 65,536 workers / at 512 (target <= 2): "
        + ", ".join(f"{m} {r:.2f}{'' if r <= 2 else ' MISSED'}" for m, r in ratios.items())
    )
    return ratios


def events_sweep():
    rows = []
    for every_h in (8.0, 2.0, 0.5, 0.125, 0.03125):
        s, loop, whole, ev = timed_run([f"failure.every_h={every_h}"])
        rows.append(
            [
                f"{0.5 / every_h:g}",
                f"{s['failures']}",
                f"{ev}",
                f"{loop:.3f}",
                f"{loop / max(ev, 1) * 1e6:.0f}",
                f"{s['steps'] / loop:,.0f}",
            ]
        )
    table(
        "wall time against events (32 workers, 60,000 steps; failure rate x the paper's high)",
        ["rate", "failures", "events", "loop s", "us per event", "steps/s"],
        rows,
    )
    rows = []
    for steps in (6000, 60000, 600000):
        s, loop, whole, ev = timed_run(
            [
                f"trainer.max_steps={steps}",
                f"trainer.warmup_steps={steps // 10}",
                "hardware.paper_time=scaled",
                "method=oobleck",
            ]
        )
        rows.append([f"{steps:,}", f"{s['failures']}", f"{ev}", f"{loop:.3f}", f"{s['steps'] / loop:,.0f}"])
    table(
        "wall time against steps at a fixed number of failures (Oobleck: no periodic events; paper time scaled)",
        ["steps", "failures", "events", "loop s", "steps/s"],
        rows,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the headline only")
    args = parser.parse_args()
    result = headline()
    result["failure_free_steps_per_s"] = failure_free()
    if not args.quick:
        methods_by_size()
        events_sweep()
    print(json.dumps({k: round(v) for k, v in result.items()}))


if __name__ == "__main__":
    main()
