"""Which method wins where: every method over cluster size, failure rate and repair time, two models.

    python -m analysis.decision_map [--out DIR] [--seeds 3] [--processes 2] [--quick]

Each cell is `experiment=decision_map` (numerics off, Llama 3's hardware, failure=llama3_taxonomy:
Llama 3's interruptions by cause, each with its blast radius, whole-job faults included) with the
cell's size, model, rate and repair. Two slices per model: the rate (1x, 10x, 100x Llama 3's per-GPU
rate) at a 600 s server replacement, and the replacement (60 s to 24 h) at Llama 3's rate. What a cell
runs, per method and seed (the same seed is the same trace for every method):

- length: 10 mean times between interruptions, between 2 h and 7 days, at most 200,000 steps; the
  trace covers 3x that (`failure.horizon_factor`), a run that outlasts it is flagged `censored`;
- sizes: 4 per model, 64 to 65,536 GPUs (`MODELS`); a whole-job fault is one job-wide event in the
  trace and the record (not one per GPU), so a run's cost follows its events, not its GPUs;
- methods: every method of the registry (analysis/simulate.py `METHODS`);
- fall-back checkpoints (MeCeFO, Bamboo, Oobleck, REFT's disk, JIT's periodic one): Daly's interval
  with M the mean time between whole-job faults, which their own mechanisms do not all absorb (their
  `auto` counts only independent failures; simulate.fallback_overrides); checkpoint-restart keeps
  `auto` (Daly's, every interruption); REFT snapshots and BAFT checkpoints every max(5 steps, 30 s)
  (an assumption that keeps the event count bounded);
- what a whole-job fault destroys is the failure config's (`failure.job_faults`: a software bug or
  dependency crashes every process, an NCCL watchdog timeout is a hang; failures/classes.py), and
  a failure inside a synchronous checkpoint write cuts it (`method.checkpoint_write`).

Written under --out: tables/decision_map_runs.csv (every run), tables/decision_map.csv (per cell and
method: mean effective training time and 95% interval over seeds), tables/decision_map.md (winner,
margin, the paired interval of the margin), figures/decision_map_<model>.png (x: GPUs, y: rate or
repair, colour: winner, hatched where the margin's interval holds 0 or it is under 0.1 points), and the anchors
(analysis/anchors.py): tables/closed_forms.md and tables/field_data.md.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Dict, List

import pandas as pd

from mecefo_exp.methods.setting_roles import FREQUENT_SAVE, setting_with_role
from mecefo_exp.registry import BASELINE, method_class

from .simulate import METHODS, effective_time, fallback_overrides, mean_interval, run_all

LLAMA3_EVERY_H = 54 * 24 / 419
MODELS = {
    "405b": {
        "sizes": [256, 2048, 16384, 65536],
        "overrides": ["model=llama_405b", "parallel.pp=16", "parallel.microbatches=16", "parallel.split=llama3"],
    },
    "7b": {
        "sizes": [64, 1024, 16384, 65536],
        "overrides": [
            "model=llama_7b",
            "model.max_position_embeddings=8192",
            "parallel.pp=2",
            "parallel.microbatches=8",
            "parallel.split=even",
        ],
    },
}
RATES = [1, 10, 100]
REPAIRS = [60, 600, 3600, 86400]
BASE_REPAIR = 600
MIN_RUN_S, MAX_RUN_S, MAX_STEPS, MTBF_MULTIPLE = 2 * 3600.0, 7 * 86400.0, 200_000, 10


def cells(models=MODELS, rates=RATES, repairs=REPAIRS) -> List[Dict]:
    """The map's cells: (model, GPUs, rate x, repair s), each slice through the shared base cell once."""
    out = []
    for model, spec in models.items():
        for gpus in spec["sizes"]:
            pairs = [(r, BASE_REPAIR) for r in rates] + [(1, s) for s in repairs if s != BASE_REPAIR]
            out += [{"model": model, "gpus": gpus, "rate_x": r, "repair_s": s} for r, s in pairs]
    return out


def cell_overrides(cell: Dict, probe: Dict) -> Dict[str, List[str]]:
    """Per method, the overrides of one cell, given the failure-free probe of its (model, GPUs)."""
    from mecefo_exp.failures import field as ff

    step_s, write_s = probe["step_s"], probe["write_s"]
    every_h = LLAMA3_EVERY_H / cell["rate_x"]
    per_s = cell["rate_x"] * cell["gpus"] / (ff.LLAMA3_DAYS * 86400 * ff.LLAMA3_GPUS)
    mtbf_s = 1 / (ff.LLAMA3_TOTAL * per_s)
    job_mtbf_s = mtbf_s / ff.job_share()
    run_s = min(MAX_RUN_S, max(MIN_RUN_S, MTBF_MULTIPLE * mtbf_s))
    steps = max(50, min(MAX_STEPS, round(run_s / step_s)))
    fallback = fallback_overrides(write_s, job_mtbf_s, step_s, steps)
    every = max(5, math.ceil(30.0 / step_s))
    common = [
        "experiment=decision_map",
        *MODELS[cell["model"]]["overrides"],
        f"cluster.n_workers={cell['gpus']}",
        f"failure.every_h={every_h!r}",
        f"failure.replace_s={cell['repair_s']}",
        f"trainer.max_steps={steps}",
    ]
    # a method's own frequent save every ~30 s, its fall-back at Daly's interval for the whole-job faults
    frequent = {m: setting_with_role(method_class(m), FREQUENT_SAVE) for m in METHODS}
    own = {m: ([f"method.{frequent[m]}={every}"] if frequent[m] else []) + fallback.get(m, []) for m in METHODS}
    return {m: common + [f"method={m}"] + own[m] for m in METHODS}


def probe(model: str, gpus: int) -> Dict:
    """The failure-free step and checkpoint write of (model, GPUs), from a one-step run."""
    from .simulate import run

    s = run(
        [
            "experiment=decision_map",
            *MODELS[model]["overrides"],
            f"cluster.n_workers={gpus}",
            "failure=none",
            f"method={BASELINE}",
            "trainer.max_steps=1",
            "method.checkpoint_interval=1",
        ]
    )
    write_s = s["time_breakdown"]["ft_overhead"] / 2  # the initial checkpoint and the one after step 1
    return {"step_s": s["clock"]["failure_free_step_s"], "write_s": write_s}


def _row(key: Dict, s: Dict) -> Dict:
    horizon = (s.get("max_steps") or 0) * ((s.get("clock") or {}).get("failure_free_step_s") or 0) * 3
    return {
        **key,
        "status": s.get("status"),
        "effective_time": effective_time(s),
        "steps": s.get("steps"),
        "sim_time_s": s.get("sim_time_s"),
        "failures": s.get("failures"),
        "rollbacks": s.get("rollbacks"),
        "fatal": s.get("fatal"),
        "censored": bool(s.get("sim_time_s") and s["sim_time_s"] > horizon),
        "wall_s": s.get("wall_time_s"),
        "error": s.get("error", ""),
    }


TIE = 0.001  # a margin under 0.1 points of effective training time is a tie, whatever its interval
KEY = ["model", "gpus", "rate_x", "repair_s", "method", "seed"]


def sweep(grid: List[Dict], seeds: int, processes: int, record: Path) -> pd.DataFrame:
    """Every (cell, method, seed) run, appended to `record` (a csv) as it ends; rows already there
    (a stopped sweep's) are kept and not run again."""
    done = pd.read_csv(record) if record.exists() else pd.DataFrame(columns=KEY)
    have = {tuple(r) for r in done[KEY].astype(str).itertuples(index=False)}
    probes: Dict = {}
    jobs, keys = [], []
    for c in grid:
        wanted = [
            (m, seed)
            for m in METHODS
            for seed in range(seeds)
            if tuple(map(str, (c["model"], c["gpus"], c["rate_x"], c["repair_s"], m, seed))) not in have
        ]
        if not wanted:
            continue
        if (c["model"], c["gpus"]) not in probes:
            probes[(c["model"], c["gpus"])] = probe(c["model"], c["gpus"])
        overrides = cell_overrides(c, probes[(c["model"], c["gpus"])])
        for method, seed in wanted:
            jobs.append(overrides[method] + [f"seed={seed}"])
            keys.append({**c, "method": method, "seed": seed})
    start = time.perf_counter()

    def keep(i, summary):
        row = pd.DataFrame([_row(keys[i], summary)])
        row.to_csv(record, mode="a", header=not record.exists() or record.stat().st_size == 0, index=False)
        if (i + 1) % 60 == 0 or i + 1 == len(jobs):
            print(f"{i + 1}/{len(jobs)} runs, {time.perf_counter() - start:.0f} s", flush=True)

    print(f"{len(jobs)} runs to do ({len(done)} already in {record})", flush=True)
    run_all(jobs, processes=processes, each=keep, chunksize=seeds)
    return pd.read_csv(record)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per cell: each method's mean and 95% half-width, the winner, its margin over the runner-up and
    the paired (same seed, same trace) 95% half-width of that margin."""
    out = []
    for key, cell in runs.groupby(["model", "gpus", "rate_x", "repair_s"], sort=True):
        row = dict(zip(["model", "gpus", "rate_x", "repair_s"], key))
        means = {}
        for method, r in cell.groupby("method"):
            mean, half = mean_interval(r.effective_time.tolist())
            means[method] = mean
            row[f"{method}"], row[f"{method}_ci95"] = mean, half
            row[f"{method}_censored"] = bool(r.censored.any())
        ranked = sorted((m for m in means if means[m] == means[m]), key=lambda m: -means[m])
        if len(ranked) >= 2:
            best, second = ranked[0], ranked[1]
            diff = (
                cell[cell.method == best].set_index("seed").effective_time
                - cell[cell.method == second].set_index("seed").effective_time
            ).dropna()
            m, half = mean_interval(diff.tolist())
            row.update(
                winner=best,
                runner_up=second,
                margin=m,
                margin_ci95=half,  # a tie: under 0.1 points
                decided=bool(m - half > 0 and m >= TIE) if half == half else False,
            )
        out.append(row)
    return pd.DataFrame(out)


def _pct(v) -> str:
    return "" if v is None or v != v else f"{100 * v:.2f}"


def markdown(table: pd.DataFrame) -> str:
    cols = ["model", "gpus", "rate_x", "repair_s"] + METHODS + ["winner", "margin"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in table.itertuples(index=False):
        d = r._asdict()
        cells_ = [str(d["model"]), str(d["gpus"]), f"{d['rate_x']:g}x", f"{d['repair_s']:g}"]
        for m in METHODS:
            text = f"{_pct(d.get(m))} ± {_pct(d.get(m + '_ci95'))}"
            cells_.append(text + (" (c)" if d.get(m + "_censored") else ""))
        mark = "" if d.get("decided") else " (tie)" if abs(d.get("margin") or 0) < TIE else " (within interval)"
        cells_ += [str(d.get("winner", "")), f"{_pct(d.get('margin'))} ± {_pct(d.get('margin_ci95'))}{mark}"]
        lines.append("| " + " | ".join(cells_) + " |")
    return "\n".join(lines)


def draw(table: pd.DataFrame, out: Path) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from .methods import METHOD_COLORS as colours

    paths = []
    for model, t in table.groupby("model"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        slices = [
            ("rate_x", t[t.repair_s == BASE_REPAIR], "failure rate (x Llama 3's per GPU)"),
            ("repair_s", t[t.rate_x == 1], "server replacement (s)"),
        ]
        sizes = sorted(t.gpus.unique())
        for ax, (ycol, part, label) in zip(axes, slices):
            ys = sorted(part[ycol].unique())
            for r in part.itertuples(index=False):
                x, y = sizes.index(r.gpus), ys.index(getattr(r, ycol))
                ax.add_patch(
                    plt.Rectangle(
                        (x - 0.5, y - 0.5),
                        1,
                        1,
                        facecolor=colours.get(r.winner, "white"),
                        hatch=None if r.decided else "///",
                        edgecolor="white" if r.decided else "black",
                        lw=0.5,
                    )
                )
                ax.text(x, y, f"{_pct(r.margin)}", ha="center", va="center", fontsize=7)
            ax.set_xlim(-0.5, len(sizes) - 0.5)
            ax.set_ylim(-0.5, len(ys) - 0.5)
            ax.set_xticks(range(len(sizes)), [f"{s:,}" for s in sizes], fontsize=7)
            ax.set_yticks(range(len(ys)), [f"{y:g}" for y in ys], fontsize=7)
            ax.set_xlabel("GPUs")
            ax.set_ylabel(label)
        handles = [Patch(color=colours[m], label=m) for m in METHODS if m in set(t.winner)]
        handles.append(
            Patch(facecolor="white", edgecolor="black", hatch="///", label="margin inside interval or < 0.1")
        )
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7)
        fig.suptitle(
            f"Which method keeps the most training time: Llama {model.upper()} (winner; number: its margin in points)",
            fontsize=9,
        )
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        (out / "figures").mkdir(parents=True, exist_ok=True)
        path = out / "figures" / f"decision_map_{model}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.decision_map", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/decision_map"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="two sizes of the 7B model, one seed: a smoke run")
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument("--no-anchors", action="store_true", help="skip the closed-form and field-data tables")
    ap.add_argument("--resume", action="store_true", help="go on with the runs already in --out")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.processes < 1:
        raise SystemExit("--seeds and --processes must be >= 1")
    models = {"7b": {**MODELS["7b"], "sizes": [64, 1024]}} if args.quick else MODELS
    start = time.perf_counter()
    (args.out / "tables").mkdir(parents=True, exist_ok=True)
    record = args.out / "tables" / "decision_map_runs.csv"
    if record.exists() and not args.resume:
        raise SystemExit(f"{record} exists: --resume to go on with it, or another --out")
    grid = cells(models, RATES[:2] if args.quick else RATES, [600, 3600] if args.quick else REPAIRS)
    runs = sweep(grid, seeds=args.seeds, processes=args.processes, record=record)
    runs = runs.sort_values(KEY).reset_index(drop=True)
    runs.to_csv(record, index=False)
    table = summarize(runs[runs.status == "ok"])
    table.to_csv(args.out / "tables" / "decision_map.csv", index=False)
    bad = runs[runs.status != "ok"]
    text = ["## Which method wins where (effective training time, %, mean ± 95% over seeds)", "", markdown(table), ""]
    if not bad.empty:
        text += [
            f"{len(bad)} runs not ok: "
            + "; ".join(f"{r.model} {r.gpus} {r.method}: {r.error}" for r in bad.itertuples()),
            "",
        ]
    (args.out / "tables" / "decision_map.md").write_text("\n".join(text))
    figures = [] if args.no_figures else draw(table, args.out)
    print("\n".join(text))
    if not args.no_anchors:
        from .anchors import write_tables

        for name, body in write_tables(args.out).items():
            print(f"{name}:\n{body}")
    print(
        f"{len(runs)} runs, {len(table)} cells in {time.perf_counter() - start:.0f} s; wrote {args.out}/tables"
        + (f" and {len(figures)} figures" if figures else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
