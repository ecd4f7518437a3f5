"""Simulated steps per wall second of numerics-free runs, and what the loop's cost grows with.

    python bench/numerics_free.py            # the headline and both sweeps (~2-4 min here)
    python bench/numerics_free.py --quick    # the headline only

LLaMA-7B on hardware=a100_32 (ZeRO-1), 32 x 256 tokens per worker, 60,000 steps (the paper's
step count), MeCeFO under failure=high. Every number is the wall time of the loop
(`Experiment.train`; setup, the FLOP count and the record's last summary are excluded and
printed apart), measured in this process:

1. the headline: the event-driven loop against the step-by-step one (trainer.event_driven=false)
   on the same run, steps per wall second of each and their ratio; target >= 1,000,000 steps/s;
2. workers, 32 to 16,384, at the paper's failure rate per cluster (failure.paper_workers =
   cluster.n_workers: about as many events whatever the size): the cost per event may grow with
   the workers (a plan names every worker), at most linearly;
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

from hydra import compose, initialize_config_dir  # noqa: E402

from mecefo_exp.config import validate  # noqa: E402
from mecefo_exp.hydra_glue import register_configs  # noqa: E402
from mecefo_exp.trainer import Experiment  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["model=llama_7b", "hardware=a100_32", "hardware.shard=optimizer", "trainer.numerics=false",
          "cluster.n_workers=32", "data.micro_batch=32", "data.seq_len=256", "trainer.max_steps=60000",
          "trainer.warmup_steps=6000", "trainer.eval_every=0", "trainer.progress=none", "trainer.log_events=0",
          "method=mecefo", "failure=high"]
TARGET = 1_000_000


def timed_run(overrides):
    """(summary, loop wall s, whole run wall s, events written)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=COMMON + overrides)
    validate(cfg)
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
    print(f"  event-driven loop {w_ev * 1e3:.0f} ms = {rate:,.0f} steps/s; step by step {w_step:.2f} s = "
          f"{rate_step:,.0f} steps/s; ratio {rate / rate_step:.0f}x; simulated time equal within {rel:.1e}")
    print(f"  whole run (setup, FLOP cache hit, record) {whole:.2f} s; target >= {TARGET:,} steps/s in the loop: "
          f"{'met' if rate >= TARGET else 'MISSED'}")
    return {"steps_per_s": rate, "step_by_step_steps_per_s": rate_step, "events": ev}


def table(title, header, rows):
    print(f"\n{title}\n| {' | '.join(header)} |\n|{'---|' * len(header)}")
    for r in rows:
        print(f"| {' | '.join(r)} |")


def workers_sweep():
    rows, base = [], None
    for n in (32, 128, 512, 2048, 8192, 16384):
        s, loop, whole, ev = timed_run([f"cluster.n_workers={n}", f"failure.paper_workers={n}"])
        per_event = loop / max(ev, 1)
        base = base or per_event
        rows.append([f"{n:,}", f"{ev}", f"{loop:.3f}", f"{per_event * 1e6:.0f}", f"{per_event / base:.1f}",
                     f"{whole - loop:.2f}"])
    table("wall time against workers (60,000 steps, failure=high per cluster of n workers)",
          ["workers", "events", "loop s", "us per event", "per event vs 32", "setup + record s"], rows)


def events_sweep():
    rows = []
    for every_h in (8.0, 2.0, 0.5, 0.125, 0.03125):
        s, loop, whole, ev = timed_run([f"failure.every_h={every_h}"])
        rows.append([f"{0.5 / every_h:g}", f"{s['failures']}", f"{ev}", f"{loop:.3f}",
                     f"{loop / max(ev, 1) * 1e6:.0f}", f"{s['steps'] / loop:,.0f}"])
    table("wall time against events (32 workers, 60,000 steps; failure rate x the paper's high)",
          ["rate", "failures", "events", "loop s", "us per event", "steps/s"], rows)
    rows = []
    for steps in (6000, 60000, 600000):
        s, loop, whole, ev = timed_run([f"trainer.max_steps={steps}", f"trainer.warmup_steps={steps // 10}",
                                        "hardware.paper_time=scaled", "method=oobleck"])
        rows.append([f"{steps:,}", f"{s['failures']}", f"{ev}", f"{loop:.3f}", f"{s['steps'] / loop:,.0f}"])
    table("wall time against steps at a fixed number of failures (Oobleck: no periodic events; paper time scaled)",
          ["steps", "failures", "events", "loop s", "steps/s"], rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the headline only")
    args = parser.parse_args()
    register_configs()
    result = headline()
    if not args.quick:
        workers_sweep()
        events_sweep()
    print(json.dumps({k: round(v) for k, v in result.items()}))


if __name__ == "__main__":
    main()
