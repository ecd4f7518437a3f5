"""Our checkpoint (Varuna), Oobleck and Bamboo against the Oobleck artifact's own simulator.

    python bench/oobleck_artifact.py [--models bert_large,...] [--traces 10m,...] [--quirks]

Runs the harness (numerics off) on every cell of the artifact's throughput-versus-failure-
frequency evaluation: 3 models x 5 node traces x 3 systems, with the artifact's tables and
constants (conf/scenario/oobleck_artifact/), and prints our samples/s beside the artifact's
(conf/scenario/oobleck_artifact/reference.csv, produced by running the artifact's simulator
at the commit it names) with the ratio. `--quirks` switches on the artifact's behaviours that
we model as options (docs/ARTIFACT.md). The sweep `python run.py -m experiment=oobleck_artifact`
runs the same cells through Hydra and writes the analysis tables.

    python bench/oobleck_artifact.py --artifact <checkout>/tools/simulator [--models ...] [--traces ...]

runs the artifact's own Varuna simulator from a checkout of its branch (optional, not in CI; it
needs nothing beyond Python's standard library) as it is and with its checkpoint-failure test
walking its event heap in time order instead of storage order (docs/ARTIFACT.md, quirk 3), beside
ours with `scenario.quirks=true method.variant_options.storage_order=false`.
"""

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from mecefo_exp import api  # noqa: E402

MODELS = ("bert_large", "gpt3_2_7b", "gpt3_6_7b")
TRACES = ("6h", "3h", "1h", "30m", "10m")
SYSTEMS = {"checkpoint": "varuna", "oobleck": "oobleck", "bamboo": "bamboo"}


def reference():
    path = ROOT / "conf" / "scenario" / "oobleck_artifact" / "reference.csv"
    with open(path) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["model"], r["trace"], r["method"]): r for r in rows}


def run_cell(model, trace, method, extra=()):
    overrides = [
        f"scenario=oobleck_artifact/{model}",
        f"method={method}",
        "trainer.progress=none",
        "trainer.log_events=0",
        f"scenario.trace={trace}",
        *extra,
    ]
    cfg = api.compose(overrides, check=False)
    try:
        api.validate_run(cfg)
    except Exception as e:  # out of memory: the table says it cannot run
        return None, str(e)
    with tempfile.TemporaryDirectory() as d:
        summary = api.run(cfg, Path(d))
    return summary["window"]["samples_per_s"] or 0.0, None  # no step completed: nothing credited


ARTIFACT_MODELS = {"bert_large": "BERT-large", "gpt3_2_7b": "GPT-3-2_7b", "gpt3_6_7b": "GPT-3-6_7b"}


def artifact_varuna(simulator_dir: str, model: str, trace: str, time_ordered: bool) -> float:
    """The artifact's Varuna on one trace, as E:102-116 runs it; `time_ordered`: a checkpoint
    fails when a queued removal comes before its completion event in time (our subclass)."""
    import contextlib
    import io
    import logging

    sys.path.insert(0, simulator_dir)
    import varuna_simulator as V  # the artifact's module, from the checkout given

    class TimeOrdered(V.Simulator):
        def checkpointing_will_fail(self):
            done = min(e for e in self.events if e.kind == V.EventKind.CHECKPOINT_COMPLETE)
            return any(e.kind == V.EventKind.SPOT_INSTANCE_REMOVE and e < done for e in self.events)

    logging.disable(logging.CRITICAL)
    cls = TimeOrdered if time_ordered else V.Simulator
    with open(Path(simulator_dir) / "traces" / f"{trace}.csv") as f, contextlib.redirect_stdout(io.StringIO()):
        sim = cls(
            seed=None,
            start_hour=0,
            generate_addition_probabilities=None,
            removal_probability=None,
            generate_graphs=False,
            spot_instance_trace=f,
            model=ARTIFACT_MODELS[model],
            steps_per_run=200000,
            time_hard_stop=True,
            no_small_model_fallback=False,
        )
        return sim.simulate().average_performance


def compare_time_ordered(simulator_dir: str, models, traces) -> None:
    print(f"{'model':<11} {'trace':<5} {'artifact':>10} {'in time order':>14} {'ours, time order':>17} {'ratio':>7}")
    for model in models:
        for trace in traces:
            shipped = artifact_varuna(simulator_dir, model, trace, time_ordered=False)
            ordered = artifact_varuna(simulator_dir, model, trace, time_ordered=True)
            ours, _ = run_cell(
                model, trace, "checkpoint", ["scenario.quirks=true", "method.variant_options.storage_order=false"]
            )
            print(f"{model:<11} {trace:<5} {shipped:>10.4f} {ordered:>14.4f} {ours:>17.4f} {ours / ordered:>7.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--methods", default=",".join(SYSTEMS))
    ap.add_argument("--quirks", action="store_true", help="switch on the artifact's behaviours we model")
    ap.add_argument("extra", nargs="*", help="more overrides for every cell")
    ap.add_argument(
        "--artifact",
        metavar="DIR",
        help="the artifact's tools/simulator folder: run its Varuna, as it is "
        "and with its checkpoint test in time order, beside ours",
    )
    args = ap.parse_args()
    if args.artifact:
        if not (Path(args.artifact) / "varuna_simulator.py").is_file():
            sys.exit(f"--artifact {args.artifact}: no varuna_simulator.py there (give the checkout's tools/simulator)")
        return compare_time_ordered(args.artifact, args.models.split(","), args.traces.split(","))
    ref = reference()
    extra = list(args.extra) + (["scenario.quirks=true"] if args.quirks else [])
    t0, within, cells = time.perf_counter(), 0, 0
    print(f"{'model':<11} {'trace':<5} {'system':<8} {'ours':>10} {'artifact':>10} {'ratio':>7}")
    for model in args.models.split(","):
        for trace in args.traces.split(","):
            for method in args.methods.split(","):
                r = ref[(model, trace, method)]
                ours, error = run_cell(model, trace, method, extra)
                theirs = float(r["samples_per_s"])
                if r["status"] == "OOM" or ours is None:
                    ok = r["status"] == "OOM" and ours is None
                    print(
                        f"{model:<11} {trace:<5} {SYSTEMS[method]:<8} {'OOM' if ours is None else f'{ours:.4f}':>10} "
                        f"{'OOM' if r['status'] == 'OOM' else f'{theirs:.4f}':>10} {'same' if ok else 'DIFFER':>7}"
                    )
                    within += ok
                else:
                    ratio = ours / theirs if theirs > 0 else float("inf")
                    within += abs(ratio - 1) <= 0.02
                    print(
                        f"{model:<11} {trace:<5} {SYSTEMS[method]:<8} {ours:>10.4f} {theirs:>10.4f} {ratio:>7.3f}"
                        + ("" if abs(ratio - 1) <= 0.02 else "  <- beyond 2%")
                    )
                cells += 1
    print(f"{within}/{cells} cells within 2% (OOM where the artifact is OOM); {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
