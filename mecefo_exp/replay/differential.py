"""Our replay beside the artifact's simulators on generated node traces.

    python -m mecefo_exp.replay.differential [--fixture tests/fixtures/artifact_generated] [--traces gen_0000,...]
        [--systems varuna,oobleck,bamboo] [--models ...] [--settings freq,spot] [--jobs 2] [--worst 15]

The fixture (made by scripts/artifact_reference.py from a checkout of the artifact) holds the traces
and the samples/s the artifact's simulators, run unmodified, give on each. This runs our methods with
the artifact's behaviours on (`scenario.quirks=true`) on every cell and prints how many agree within
2%, the worst cells, and the cells docs/ARTIFACT.md lists as known with their cause. `freq` is the
throughput-versus-frequency evaluation's setting, `spot` the spot-instance evaluation's (Varuna
without its rollback for BERT-large: `method.variant_options.rollback=false`).
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "artifact_generated"
SYSTEMS = {"varuna": "checkpoint", "oobleck": "oobleck", "bamboo": "bamboo"}
#: the rows of the scenarios' comparison table, in its order: our method -> the name of its row (the
#: artifact's system it stands for; the methods the scenarios add, under their own names)
TABLE_ROWS = {"checkpoint": "Varuna", "oobleck": "Oobleck", "bamboo": "Bamboo", "mecefo": "MeCeFO", "reft": "REFT"}
MODELS = ("bert_large", "gpt3_2_7b", "gpt3_6_7b")
TOLERANCE = 0.02

Cell = Tuple[str, str, str, str]  # trace, model, system, setting


def reference(fixture: Path = FIXTURE) -> Dict[Cell, dict]:
    with open(fixture / "reference.csv") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["trace"], r["model"], r["system"], r["setting"]): r for r in rows}


def overrides(model: str, system: str, setting: str) -> List[str]:
    """The configuration of a cell, but its trace."""
    out = [
        f"scenario=oobleck_artifact/{model}",
        f"method={SYSTEMS[system]}",
        "scenario.quirks=true",
        "trainer.progress=none",
        "trainer.log_events=0",
        "trainer.threads=1",
        "hardware.timing_model=null",
    ]  # the table times every step: no model shape to count
    if system == "bamboo":  # the preset's orders are the five standard traces'; the variant derives its own
        out += ["++method.variant_options.start_order=null", "++method.variant_options.node_order=null"]
    if setting == "spot" and system == "varuna" and model == "bert_large":  # no_small_model_fallback (V:267-268)
        out.append("method.variant_options.rollback=false")
    return out


_COMPOSED: Dict[Tuple[str, str, str], object] = {}  # one composition per (model, system, setting) and process
_REFUSED: Dict[Tuple[str, str, str], Optional[str]] = {}  # its one-line refusal (a table out of memory), if any


def cell_config(trace_path: Path, model: str, system: str, setting: str):
    from .. import api
    from ..failures.nodes import trace_slots

    key = (model, system, setting)
    if key not in _COMPOSED:  # checked with its trace, in run_cell
        _COMPOSED[key] = api.compose(overrides(model, system, setting), check=False)
    cfg = copy.deepcopy(_COMPOSED[key])  # a run may write into its config: each cell gets its own
    cfg.failure.path = str(trace_path)
    cfg.cluster.n_workers = trace_slots(trace_path, 45.0)  # what the scenario's ${node_trace_slots:...} gives
    return cfg


def run_cell(cell: Cell, fixture: Path = FIXTURE) -> Tuple[Cell, Optional[float], str]:
    """(cell, our samples/s or None when the table says the system cannot run, a note)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ..api import validate_run
    from ..errors import ConfigError
    from ..run.experiment import Experiment

    trace, model, system, setting = cell
    cfg = cell_config(fixture / "traces" / f"{trace}.csv", model, system, setting)
    key = (model, system, setting)
    if key not in _REFUSED:  # the checks once per configuration: the fixture's traces are all readable
        try:
            validate_run(cfg)
            _REFUSED[key] = None
        except ConfigError as e:  # the table is 0 at the start: out of memory, as the artifact reports
            _REFUSED[key] = str(e)
    if _REFUSED[key] is not None:
        return cell, None, _REFUSED[key]
    with tempfile.TemporaryDirectory() as d:
        try:
            summary = Experiment(cfg, Path(d)).run()
        except Exception as e:  # reported as a cell that does not agree, with the reason
            return cell, float("nan"), f"{type(e).__name__}: {e}"
    value = summary.get("artifact_samples_per_s", summary["window"]["samples_per_s"])  # Varuna: its own metric
    return cell, value or 0.0, summary["status"]


def expected(cell: Cell, theirs: dict) -> float:
    """The samples/s the artifact prints (its average over its own rate series)."""
    return float(theirs["samples_per_s"])


def agrees(cell: Cell, ours: Optional[float], theirs: dict) -> bool:
    if theirs["status"] == "OOM":
        return ours is None or ours == 0.0
    if theirs["status"] == "error":
        return False
    want = expected(cell, theirs)
    return (ours or 0.0) == want if want == 0 else abs((ours or 0.0) / want - 1) <= TOLERANCE


def cause(cell: Cell, theirs: dict, known: Optional[Dict[Cell, str]] = None) -> str:
    """What is known of why a cell differs (docs/ARTIFACT.md, "Agreement"): the cause listed for it in
    known_gaps.csv, else what its reference row shows."""
    if known and cell in known:
        return known[cell]
    if theirs["status"] == "error":
        return f"the artifact raises {theirs['error']} at {theirs['error_at']}"
    if int(theirs["rate_shift"] or 0) > 0:
        return (
            "the artifact's rate series are misaligned (a failed checkpoint with fewer than 10 recorded steps "
            "lengthens one, V:1482-1484): its un-crediting (V:1231-1238) and average (V:1545-1560) read other "
            "steps' entries"
        )
    return "not attributed yet"


def cause_class(why: str) -> str:
    """A cause without its cell's particulars (the artifact line, the numbers checked)."""
    return why.split(" (")[0].split(" at ")[0]


def write_gaps(
    path: Path, cells: List[Cell], ours: Dict[Cell, Optional[float]], ref: Dict[Cell, dict], known: Dict[Cell, str]
) -> None:
    with open(path, "w", newline="") as f:
        f.write(
            "# cells of the generated and extended traces where our replay and the artifact differ by more than 2%, with\n"
            "# what is known of the cause; written by python -m mecefo_exp.replay.differential --write-gaps, causes kept\n"
        )
        w = csv.writer(f)
        w.writerow(["trace", "model", "system", "setting", "ours", "artifact", "cause"])
        for c in cells:
            r = ref[c]
            want = f"{expected(c, r):.6g}" if r["status"] == "ok" else r["status"]
            w.writerow([*c, "" if ours[c] is None else f"{ours[c]:.6g}", want, cause(c, r, known)])


def known_gaps(path: Path = FIXTURE / "known_gaps.csv") -> Dict[Cell, str]:
    """The cells known to differ, with their cause (none for a fixture made afresh)."""
    if not path.exists():
        return {}
    with open(path) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["trace"], r["model"], r["system"], r["setting"]): r["cause"] for r in rows}


def default_cells(ref: Dict[Cell, dict], generated: Optional[int] = None, extended: Optional[int] = None) -> List[Cell]:
    """Every cell of the `freq` setting, and the `spot` cells that differ from it (Varuna, BERT-large);
    with `generated` / `extended`, only the first that many traces of spot_traces.generate (gen_NNNN) /
    generate_extended (ext_NNNN; the first five are one of each regime); the artifact's own traces always."""

    def kept(trace: str) -> bool:
        for prefix, n in (("gen_", generated), ("ext_", extended)):
            if trace.startswith(prefix):
                return n is None or int(trace[len(prefix) :]) < n
        return True

    return [c for c in ref if (c[3] == "freq" or (c[2] == "varuna" and c[1] == "bert_large")) and kept(c[0])]


def run_cells(cells: Iterable[Cell], jobs: int = 1, fixture: Path = FIXTURE) -> Dict[Cell, Optional[float]]:
    cells = list(cells)
    if jobs <= 1:
        return {c: v for c, v, _ in map(run_cell, cells)}
    with ProcessPoolExecutor(jobs) as pool:
        return {c: v for c, v, _ in pool.map(run_cell, cells, [fixture] * len(cells), chunksize=16)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--traces", default=None, help="comma-separated trace names (default: all in the fixture)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument(
        "--settings",
        default=None,
        help="freq,spot (default: every freq cell, and the spot cells that differ from them: Varuna on BERT-large)",
    )
    ap.add_argument("--write-gaps", type=Path, default=None, help="write the differing cells, with their cause, here")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--worst", type=int, default=15, help="how many of the worst cells to print")
    args = ap.parse_args(argv)
    ref = reference(args.fixture)
    want = set(args.traces.split(",")) if args.traces else None
    pool = default_cells(ref) if args.settings is None else [c for c in ref if c[3] in args.settings.split(",")]
    cells = [
        c
        for c in pool
        if (want is None or c[0] in want) and c[2] in args.systems.split(",") and c[1] in args.models.split(",")
    ]
    t0 = time.perf_counter()
    ours = run_cells(cells, args.jobs, args.fixture)
    wall = time.perf_counter() - t0
    ok = [c for c in cells if agrees(c, ours[c], ref[c])]
    shifted = sum(1 for c in ok if int(ref[c]["rate_shift"] or 0) > 0)
    print(
        f"{len(ok)} of {len(cells)} cells within {TOLERANCE:.0%} of the artifact ({wall:.1f} s, {args.jobs} jobs); "
        f"{shifted} of them with its rate series misaligned"
    )
    by = {}
    for c in cells:
        by.setdefault((c[2], c[3]), [0, 0])[0 if c in ok else 1] += 1
    for (system, setting), (good, bad) in sorted(by.items()):
        print(f"  {system:8s} {setting:5s} {good:5d} agree  {bad:4d} differ")

    def gap(c):
        theirs = expected(c, ref[c]) if ref[c]["status"] == "ok" else 0.0
        return abs((ours[c] or 0.0) - theirs) / theirs if theirs else float("inf")

    known = known_gaps(args.fixture / "known_gaps.csv")
    if args.write_gaps:
        write_gaps(args.write_gaps, [c for c in cells if c not in ok], ours, ref, known)
    counts: Dict[str, int] = {}
    for c in cells:
        if c not in ok:
            why = cause_class(cause(c, ref[c], known))
            counts[why] = counts.get(why, 0) + 1
    for why, k in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  differ: {k:4d}  {why}")
    worst = sorted((c for c in cells if c not in ok), key=gap, reverse=True)[: args.worst]
    for c in worst:
        r = ref[c]
        want = f"{expected(c, r):.6g}" if r["status"] == "ok" else r["status"]
        mine = "n/a" if ours[c] is None else f"{ours[c]:.6g}"
        print(f"  {','.join(c):42s} ours {mine:>12} artifact {want:>12}  {cause_class(cause(c, r, known))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
