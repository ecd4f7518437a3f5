"""The paper-scale Table 2 study: which reading of the paper's failure scenarios reproduces it?

    python -m analysis.paper_scale runs/sweeps/<sweep> [more dirs] --out <dir> [--no-figures]

The sweep of conf/experiment/paper_table2.yaml runs LLaMA-350M / 1B / 7B on the paper's
32-GPU cluster with numerics off, every method at every failure level under the default
failure reading, and at `high` a grid of *readings* of the paper's Table 1 (which it does
not pin down): failure.process (per_worker | cluster) x failure.unit_gpus (1 | 8) x
failure.repair (fixed | tick | replace after replace_s), plus MeCeFO's drop against the
inter-node bandwidth. The default analysis (analysis.tables) would average those runs
together, since its key is (model, method, failure, seed, max_steps); this module keys
every run by its reading and bandwidth as well.

Every drop is against the failure-free run of the same setting, method and
inter_node_GBps (a failure-free run does not depend on the reading, so its reading is "-").

Written under <out>:

    runs.{parquet,csv}, runs_all.{parquet,csv}   the runs (de-duplicated / every folder found)
    tables/table2_default.{md,csv}   paper Table 2 at the default reading and 25 GB/s
    tables/table2_readings.{md,csv}  per model x reading: the drops at high of Bamboo, Oobleck,
                                     MeCeFO beside the paper's, and whether all three reproduce it
    tables/which_reading.{md,csv}    reading x model matrix of `reproduces` (+ *_counts.csv)
    tables/memory.{md,csv}           peak GB per worker, normal / neighbour / naive neighbour-do-both
    tables/clock.{md,csv}            the calibrated clock per model
    tables/runs.md                   every kept run with its reading, bandwidth and status
    figures/mecefo_drop_vs_outage_<model>.{png,pdf}
    figures/mecefo_drop_vs_bandwidth_<model>.{png,pdf}

Failed, running and incomplete runs are printed and listed in runs.md, never dropped
silently; so are runs under failures that have no failure-free run to be compared with.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import pandas as pd

from . import paper
from . import tables as shared_tables
from .collect import (
    CONFIG_COLUMNS,
    CONFIG_PATHS,
    DEDUP_KEY,
    deduplicate,
    dig,
    find_run_dirs,
    load_run,
    ok_runs,
    run_config,
    sort_runs,
    write_table,
)
from .formats import fmt_num, fmt_pct, fmt_ratio, fmt_tok
from .methods import METHOD_LABELS
from .tables import SETTING, setting_columns, throughput_markdown, throughput_table, to_markdown

log = logging.getLogger(__name__)

#: the failure-reading keys, where they live in the resolved config, and their defaults when a
#: config predates them (mecefo_exp/config/schema.py: the default reading was then the only one)
READING_PATHS = {
    "process": ("failure", "process"),
    "unit_gpus": ("failure", "unit_gpus"),
    "repair": ("failure", "repair"),
    "replace_s": ("failure", "replace_s"),
}
READING_DEFAULTS = {"process": "per_worker", "unit_gpus": 1, "repair": "fixed", "replace_s": 300.0}
PROCESS_ORDER = ("per_worker", "cluster")
REPAIR_ORDER = ("fixed", "tick", "replace")
#: the reading of a failure-free run: none applies
NO_READING = "-"
DEFAULT_READING = "per_worker/1gpu/fixed"
#: the paper's inter-node bandwidth (InfiniBand 200 Gb/s per machine; conf/hardware/a100_32.yaml)
PAPER_GBPS = 25.0
#: the methods of the paper's Table 2, in its order
PAPER_METHODS = tuple(paper.TABLE2_THROUGHPUT[paper.REFERENCE_ROW])
PAPER_MODEL_ORDER = tuple(paper.PAPER_MODELS)
#: a drop reproduces the paper's when it is within 1 percentage point or 25% (relative) of it
TOL_ABS = 0.01
TOL_REL = 0.25
STUDY_KEY = (*DEDUP_KEY, "reading", "inter_node_GBps")
#: what a run's numbers are averaged over seeds by (a reading is its four columns)
GROUP = (*SETTING, "inter_node_GBps", "reading", "process", "unit_gpus", "repair", "replace_s", "method", "failure")
MEAN_COLUMNS = ("throughput_tok_s", "mean_workers_down_expected", "mean_workers_down", "failures", "outage_s")


# ------------------------------------------------------------------------ collecting
def reading_label(process, unit_gpus, repair, replace_s=None) -> str:
    """'per_worker/1gpu/fixed', 'cluster/8gpu/replace 60s': replace_s only where it means something."""
    label = f"{process}/{int(unit_gpus)}gpu/{repair}"
    return f"{label} {float(replace_s):g}s" if repair == "replace" else label


#: the words for a reading's parts (reading_words)
PROCESS_WORDS = {"per_worker": "per unit", "cluster": "cluster-wide"}
REPAIR_WORDS = {"fixed": "fixed repair", "tick": "repair at the next tick"}


def reading_words(reading: str) -> str:
    """A reading label in words: 'per_worker/1gpu/fixed' -> 'per unit, 1-GPU units, fixed repair',
    'cluster/8gpu/replace 60s' -> 'cluster-wide, 8-GPU units, a spare after 60 s'. The labels
    themselves stay the short keys (table2_readings.md's rows, the CSV files, RESULTS.md)."""
    if reading == NO_READING:
        return "failure-free (no reading)"
    m = re.fullmatch(r"(\w+)/(\d+)gpu/(fixed|tick|replace)(?: ([\d.e+-]+)s)?", str(reading))
    if not m:
        return str(reading)
    process, unit, repair, replace_s = m.groups()
    repair = f"a spare after {replace_s} s" if repair == "replace" else REPAIR_WORDS[repair]
    return f"{PROCESS_WORDS.get(process, process)}, {unit}-GPU units, {repair}"


def _expand_dicts(row: Dict[str, object]) -> Dict[str, object]:
    """collect.load_run flattens one level (memory -> memory_peak_GB = {...}); the study's tables
    want memory_peak_GB_normal etc. as plain columns."""
    out: Dict[str, object] = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update({f"{k}_{sub}": x for sub, x in v.items()})
        else:
            out[k] = v
    return out


def _reading_columns(cfg: Optional[dict], failure) -> Dict[str, object]:
    """process, unit_gpus, repair, replace_s (meaningful for repair=replace only), reading and
    outage_s (how long a failed unit stays down: replace_s, or the preset's recover_h for fixed;
    tick is a spread, not one length). A failure-free run has no reading."""
    if failure == "none":
        return {
            "process": None,
            "unit_gpus": None,
            "repair": None,
            "replace_s": None,
            "reading": NO_READING,
            "outage_s": None,
        }
    vals = {k: (dig(cfg, p) if cfg else None) for k, p in READING_PATHS.items()}
    vals = {k: READING_DEFAULTS[k] if v is None else v for k, v in vals.items()}
    vals["unit_gpus"] = int(vals["unit_gpus"])
    vals["replace_s"] = float(vals["replace_s"]) if vals["repair"] == "replace" else None
    recover_h = dig(cfg, ("failure", "recover_h")) if cfg else None
    if vals["repair"] == "replace":
        outage = vals["replace_s"]
    elif vals["repair"] == "fixed" and recover_h is not None:
        outage = float(recover_h) * 3600.0
    else:
        outage = None
    return {
        **vals,
        "reading": reading_label(vals["process"], vals["unit_gpus"], vals["repair"], vals["replace_s"]),
        "outage_s": outage,
    }


def load_study_run(run_dir) -> Dict[str, object]:
    """collect.load_run's row, with config columns from the run's own config.yaml, the reading
    and the inter-node bandwidth, and summary.memory / summary.clock as plain columns."""
    run_dir = Path(run_dir)
    row = load_run(run_dir)
    row.pop("_config", None)
    row = {**_expand_dicts(row), "label": ""}
    cfg = run_config(run_dir)
    if cfg:
        for col in CONFIG_COLUMNS:
            value = dig(cfg, CONFIG_PATHS[col])
            if value is not None:
                row[col] = value
        row["experiment"] = cfg.get("experiment", row.get("experiment"))
    gbps = dig(cfg, ("hardware", "inter_node_GBps")) if cfg else None
    row["inter_node_GBps"] = float(gbps) if gbps is not None else float("nan")
    row.update(_reading_columns(cfg, row.get("failure")))
    return row


def collect_study(roots: Iterable) -> pd.DataFrame:
    """Every run folder under `roots`, de-duplicated on STUDY_KEY (newest ok run kept;
    `superseded_by` names it for the others)."""
    rows = [load_study_run(d) for d in find_run_dirs([Path(r) for r in roots])]
    if not rows:
        empty = pd.DataFrame(
            columns=["run_dir", "status", *CONFIG_COLUMNS, *STUDY_KEY[len(DEDUP_KEY) :], "mtime", "superseded_by"]
        )
        return empty.assign(selected=pd.Series(dtype=bool))
    df = pd.DataFrame(rows)
    df["mtime"] = pd.to_numeric(df["mtime"])
    return sort_runs(deduplicate(df, STUDY_KEY)).reset_index(drop=True)


def _run_name(r) -> str:
    bw = fmt_g(r.get("inter_node_GBps"))
    bw = f" {bw} GB/s" if bw else ""
    return f"{r['model']} {r['method']} failure={r['failure']} {r['reading']} ({reading_words(r['reading'])}){bw} seed={r['seed']}"


def problems(runs: pd.DataFrame, drops: Optional[pd.DataFrame] = None) -> List[str]:
    """Lines naming every kept run that did not finish, and every run under failures that has no
    failure-free run to be compared with: these are in no table."""
    lines = []
    if runs.empty:
        return ["no run folders found"]
    kept = runs[runs["selected"]]
    for _, r in kept[kept["status"] != "ok"].iterrows():
        err = r.get("error")
        err = f": {err}" if isinstance(err, str) and err else ""
        lines.append(f"  {r['status']:10s} {_run_name(r)} -> {r['run_dir']}{err}")
    if drops is not None and not drops.empty:
        for _, r in drops[drops["thr_none"].isna()].iterrows():
            lines.append(
                f"  no failure-free run to compare with: {r['model']} {r['method']} failure={r['failure']} "
                f"{r['reading']} ({reading_words(r['reading'])}) {fmt_g(r['inter_node_GBps']) or '?'} GB/s"
            )
    return lines


def describe(runs: pd.DataFrame, drops: Optional[pd.DataFrame] = None) -> str:
    if runs.empty:
        return "no run folders found"
    kept = runs[runs["selected"]]
    counts = kept["status"].value_counts().to_dict()
    head = f"{len(runs)} run folders, {len(kept)} after de-duplication on {', '.join(STUDY_KEY)}: " + ", ".join(
        f"{n} {s}" for s, n in counts.items()
    )
    return "\n".join([head, *problems(runs, drops)])


# ------------------------------------------------------------------------ drops
def seed_means(runs: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds of the finished runs per (setting, bandwidth, reading, method, failure)."""
    return shared_tables.seed_means(runs, MEAN_COLUMNS, keys=GROUP)


def drop_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, bandwidth, reading, method, failure != none): its throughput, the
    failure-free throughput of the same setting, method and bandwidth, and drop = 1 - thr/thr_none."""
    means = seed_means(runs)
    base_keys = [*SETTING, "inter_node_GBps", "method"]
    base = means[means["failure"] == "none"][base_keys + ["throughput_tok_s"]].rename(
        columns={"throughput_tok_s": "thr_none"}
    )
    faulty = means[means["failure"] != "none"].rename(columns={"throughput_tok_s": "thr"})
    out = faulty.merge(base, on=base_keys, how="left")
    out["drop"] = [
        1.0 - t / b if (b > 0 and math.isfinite(t)) else float("nan") for t, b in zip(out["thr"], out["thr_none"])
    ]
    return out


def within(drop: float, paper_drop: Optional[float]) -> Optional[bool]:
    """Does `drop` reproduce the paper's? Within TOL_ABS (1 percentage point) or TOL_REL (25%)
    of it; None when either is missing. The 1e-12 keeps a drop exactly on the edge in."""
    if paper_drop is None or drop is None or not (math.isfinite(drop) and math.isfinite(paper_drop)):
        return None
    gap = abs(drop - paper_drop)
    return gap <= TOL_ABS + 1e-12 or gap <= TOL_REL * abs(paper_drop) + 1e-12


def _yes_no(flag: Optional[bool]) -> str:
    return "n/a" if flag is None else ("yes" if flag else "no")


def _all_of(flags: Sequence[Optional[bool]]) -> str:
    """yes when every flag is yes; no when any is no; n/a when one is missing and none is no."""
    if any(f is False for f in flags):
        return "no"
    return "yes" if flags and all(f is True for f in flags) else "n/a"


def model_rank(model) -> int:
    return PAPER_MODEL_ORDER.index(model) if model in PAPER_MODEL_ORDER else len(PAPER_MODEL_ORDER)


def _reading_rank(r) -> tuple:
    """Readings in the order of the sweep: default first, then process, unit, repair, replace_s."""
    if r["reading"] == NO_READING:
        return (-1,)
    proc = PROCESS_ORDER.index(r["process"]) if r["process"] in PROCESS_ORDER else len(PROCESS_ORDER)
    rep = REPAIR_ORDER.index(r["repair"]) if r["repair"] in REPAIR_ORDER else len(REPAIR_ORDER)
    replace_s = r["replace_s"] if isinstance(r["replace_s"], float) and math.isfinite(r["replace_s"]) else 0.0
    return (0 if r["reading"] == DEFAULT_READING else 1, proc, int(r["unit_gpus"] or 0), rep, replace_s)


def _is_paper_bandwidth(v) -> bool:
    return isinstance(v, float) and math.isclose(v, PAPER_GBPS)


def at_paper_bandwidth(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["inter_node_GBps"].map(_is_paper_bandwidth).astype(bool)]


# ------------------------------------------------------------------------ (a) Table 2, default reading
def default_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of Table 2 proper: failure-free or the default reading, at the paper's 25 GB/s."""
    sel = runs["reading"].isin([NO_READING, DEFAULT_READING])
    return at_paper_bandwidth(runs[sel])


def table2_default(runs: pd.DataFrame) -> pd.DataFrame:
    """analysis.tables.throughput_table on the default reading: the same columns as the default
    analysis (thr_<level>, drop_<level>, resilience_<level>, paper_*)."""
    t = throughput_table(default_runs(runs))
    if not t.empty:
        t = t.assign(_m=t["model"].map(model_rank)).sort_values("_m", kind="stable").drop(columns="_m")
    return t.reset_index(drop=True)


# ------------------------------------------------------------------------ (b) readings
def table2_readings(drops: pd.DataFrame) -> pd.DataFrame:
    """Per setting x reading at 25 GB/s: the drops at high of the paper's three methods, the paper's
    drop beside each, whether each is within tolerance, and `reproduces` (all three)."""
    high = at_paper_bandwidth(drops[(drops["failure"] == "high") & drops["method"].isin(PAPER_METHODS)])
    keys = [*SETTING, "reading", "process", "unit_gpus", "repair", "replace_s"]
    rows = []
    for key, group in high.groupby(keys, dropna=False, sort=False):
        row = dict(zip(keys, key))
        by_method = group.set_index("method")
        flags = []
        for m in PAPER_METHODS:
            d = float(by_method.loc[m, "drop"]) if m in by_method.index else float("nan")
            ref = paper.throughput(row["model"], m)["drop_high"]
            row[f"drop_{m}"] = d
            row[f"paper_drop_{m}"] = float("nan") if ref is None else ref
            flag = within(d, ref)
            row[f"match_{m}"] = _yes_no(flag)
            flags.append(flag)
        row["reproduces"] = _all_of(flags)
        down = by_method["mean_workers_down_expected"] if "mean_workers_down_expected" in by_method else None
        row["workers_down_expected"] = float(down.mean()) if down is not None else float("nan")
        row["paper_ref"] = paper.ref_label(row["model"])
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=[*keys, "reproduces"])
    t = pd.DataFrame(rows)
    order = sorted(
        t.index, key=lambda i: (model_rank(t.loc[i, "model"]), str(t.loc[i, "model"]), _reading_rank(t.loc[i]))
    )
    return t.loc[order].reset_index(drop=True)


# ------------------------------------------------------------------------ (c) which reading
def which_reading(readings: pd.DataFrame) -> Tuple[pd.DataFrame, pd.DataFrame, List[str]]:
    """(matrix reading x model of `reproduces` with an `all_models` column, per-model counts,
    the readings that reproduce the paper for every model run)."""
    if readings.empty:
        return (
            pd.DataFrame(columns=["reading", "all_models"]),
            pd.DataFrame(columns=["model", "readings", "reproduce", "reproducing"]),
            [],
        )
    models = sorted(readings["model"].unique(), key=lambda m: (model_rank(m), str(m)))
    order = list(dict.fromkeys(readings["reading"]))  # readings() is sorted already
    matrix = readings.pivot_table(index="reading", columns="model", values="reproduces", aggfunc="first")
    matrix = matrix.reindex(index=order, columns=models).fillna("n/a")
    as_flag = {"yes": True, "no": False}
    matrix["all_models"] = [_all_of([as_flag.get(v) for v in matrix.loc[r, models]]) for r in matrix.index]
    matrix = matrix.reset_index()
    matrix.columns.name = None
    counts = pd.DataFrame(
        [
            {
                "model": m,
                "readings": int((matrix[m] != "n/a").sum()),
                "reproduce": int((matrix[m] == "yes").sum()),
                "reproducing": ", ".join(matrix.loc[matrix[m] == "yes", "reading"]),
            }
            for m in models
        ]
    )
    winners = list(matrix.loc[matrix["all_models"] == "yes", "reading"])
    return matrix, counts, winners


# ------------------------------------------------------------------------ (d) memory, (e) clock
def _per_model_source(runs: pd.DataFrame, needed: str) -> pd.DataFrame:
    """One finished run per model to read a per-model quantity from: MeCeFO's failure-free run at
    25 GB/s if there is one (the neighbour kernel, and so its memory and FLOP ratio, exists only
    under MeCeFO), else any of MeCeFO's, else any run of the model that has `needed`."""
    ok = ok_runs(runs)
    if ok.empty or needed not in ok:
        return ok.iloc[0:0]
    ok = ok[ok[needed].notna()]
    rank = pd.DataFrame(
        {
            "me": ok["method"] != paper.METHOD,
            "f": ok["failure"] != "none",
            "bw": ~ok["inter_node_GBps"].map(_is_paper_bandwidth).astype(bool),
            "m": ok["model"].map(model_rank),
        },
        index=ok.index,
    )
    ok = ok.loc[rank.sort_values(["m", "me", "f", "bw"], kind="stable").index]
    return ok.drop_duplicates(subset=list(SETTING), keep="first").reset_index(drop=True)


#: what the paper says about memory, as far as our sources record it (docs/METHODS.md, "Other experiments")
MEMORY_NOTE = (
    'Paper (docs/METHODS.md, "Other experiments"): in the ablation of the three techniques, "without them the '
    'neighbor runs out of memory", i.e. naive neighbour-do-both should not fit. docs/METHODS.md and analysis/paper.py '
    "record no memory figure (no GB and no percentage saving), so none is compared here; `neighbour / naive` "
    "is our own number."
)


def memory_table(runs: pd.DataFrame) -> pd.DataFrame:
    src = _per_model_source(runs, "memory_peak_GB_normal")
    rows = []
    for _, r in src.iterrows():
        row = {c: r[c] for c in SETTING}
        row["source_method"] = r["method"]
        for c in ("shard", "capacity_GB", "static_GB"):
            row[c] = r.get(f"memory_{c}")
        for k in ("normal", "neighbour", "naive"):
            row[f"peak_{k}_GB"] = _float(r.get(f"memory_peak_GB_{k}"))
            fits = r.get(f"memory_fits_{k}")
            row[f"fits_{k}"] = _yes_no(None if fits is None or fits != fits else bool(fits))
        row["neighbour_over_naive"] = row["peak_neighbour_GB"] / row["peak_naive_GB"]
        row["neighbour_over_normal"] = row["peak_neighbour_GB"] / row["peak_normal_GB"]
        row["paper_naive_fits"] = _yes_no(paper.ABLATION_MEMORY["naive_fits"])
        row["agrees_with_paper"] = (
            "n/a" if row["fits_naive"] == "n/a" else _yes_no(row["fits_naive"] == row["paper_naive_fits"])
        )
        rows.append(row)
    return pd.DataFrame(rows)


def clock_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The clock each model was timed with; MeCeFO's simulated failure-free tokens/s beside the
    paper's (the efficiency is calibrated on that number, so they should agree)."""
    src = _per_model_source(runs, "clock_failure_free_step_s")
    rows = []
    for _, r in src.iterrows():
        row = {c: r[c] for c in SETTING}
        row.update(
            {"source_method": r["method"], "source_failure": r["failure"], "inter_node_GBps": r["inter_node_GBps"]}
        )
        for c in (
            "timed_model",
            "compute",
            "efficiency",
            "efficiency_source",
            "implied_mfu",
            "failure_free_step_s",
            "flop_ratio_neighbour_normal",
            "n_params_timed",
        ):
            row[c] = r.get(f"clock_{c}")
        row["thr_none"] = r["throughput_tok_s"] if r["failure"] == "none" else float("nan")
        ref = paper.throughput(r["model"], paper.METHOD)["none"] if r["method"] == paper.METHOD else None
        row["paper_thr_none"] = _float(ref)
        rows.append(row)
    return pd.DataFrame(rows)


def fmt_g(v) -> str:
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:g}"


def _float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


# ------------------------------------------------------------------------ markdown
def readings_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs at failure=high_"
    cols = setting_columns(t)
    cols.update({"reading": ("reading", None), "workers_down_expected": ("workers down (expected)", fmt_num(2))})
    for m in PAPER_METHODS:
        name = METHOD_LABELS[m]
        cols.update(
            {
                f"drop_{m}": (f"{name} drop", fmt_pct),
                f"paper_drop_{m}": (f"{name} paper", fmt_pct),
                f"match_{m}": (f"{name} ok", None),
            }
        )
    cols["reproduces"] = ("reproduces", None)
    note = (
        f"\n\nDrop at failure=high = 1 - thr(high)/thr(none), against the failure-free run of the same model, "
        f"method and bandwidth ({PAPER_GBPS:g} GB/s here). ok = within {TOL_ABS * 100:g} percentage point or "
        f"{TOL_REL * 100:g}% (relative) of the paper's drop (MeCeFO paper Table 2); reproduces = yes when all three "
        f"are. Reading = failure.process / failure.unit_gpus / failure.repair (replace: after replace_s)."
    )
    return to_markdown(t, cols, drop_empty=False) + note  # a method without runs shows as blank, not missing


def which_markdown(matrix: pd.DataFrame, counts: pd.DataFrame, winners: List[str]) -> str:
    if matrix.empty:
        return "_no finished runs at failure=high_"
    models = [c for c in matrix.columns if c not in ("reading", "all_models")]
    missing = [m for m in PAPER_MODEL_ORDER if m not in models]
    scope = ", ".join(models) + (f"; not run: {', '.join(missing)}" if missing else "")
    lines = [
        f"Readings that reproduce the paper's drops at high for every model run ({scope}): "
        + (", ".join(f"`{w}` ({reading_words(w)})" for w in winners) if winners else "**none**"),
        "",
    ]
    lines.append(
        to_markdown(
            counts,
            {
                "model": ("model", None),
                "readings": ("readings run", None),
                "reproduce": ("reproduce", None),
                "reproducing": ("which", None),
            },
            drop_empty=False,
        )
    )
    lines.append("")
    matrix = matrix.assign(words=[reading_words(r) for r in matrix["reading"]])
    cols = {
        "reading": ("reading", None),
        "words": ("what it means", None),
        **{m: (m, None) for m in models},
        "all_models": ("all models", None),
    }
    lines.append(to_markdown(matrix, cols, drop_empty=False))
    lines.append(
        f"\nyes = Bamboo's, Oobleck's and MeCeFO's drops are all within {TOL_ABS * 100:g} percentage "
        f"point or {TOL_REL * 100:g}% of the paper's (table2_readings.md); n/a = a run is missing."
    )
    return "\n".join(lines)


def memory_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished run reports memory_\n\n" + MEMORY_NOTE
    gb = fmt_num(1)
    cols = setting_columns(t)
    cols.update(
        {
            "shard": ("shard", None),
            "capacity_GB": ("capacity GB", gb),
            "static_GB": ("static GB", gb),
            "peak_normal_GB": ("normal GB", gb),
            "fits_normal": ("fits", None),
            "peak_neighbour_GB": ("neighbour GB", gb),
            "fits_neighbour": ("fits", None),
            "peak_naive_GB": ("naive GB", gb),
            "fits_naive": ("fits", None),
            "neighbour_over_normal": ("neighbour / normal", fmt_ratio),
            "neighbour_over_naive": ("neighbour / naive", fmt_ratio),
            "paper_naive_fits": ("paper: naive fits", None),
            "agrees_with_paper": ("agrees", None),
        }
    )
    note = (
        "\n\nPeak memory per worker (summary.json `memory`): static state (weights, fp32 master, Adam, "
        "gradients; sharded as `shard` says) plus the activations of one kernel: normal = one micro-batch; "
        "neighbour = MeCeFO's two micro-batches with its approximations; naive = neighbour-do-both without them "
        "(two normal micro-batches). Not modelled: fragmentation, temporary buffers. " + MEMORY_NOTE
    )
    return to_markdown(t, cols) + note


def clock_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished run reports its clock_"
    cols = setting_columns(t)
    cols.update(
        {
            "timed_model": ("timed", None),
            "efficiency": ("efficiency", fmt_num(3)),
            "implied_mfu": ("implied MFU", fmt_pct),
            "failure_free_step_s": ("failure-free step s", fmt_num(3)),
            "flop_ratio_neighbour_normal": ("neighbour / normal FLOPs", fmt_ratio),
            "thr_none": ("MeCeFO tok/s none", fmt_tok),
            "paper_thr_none": ("paper tok/s none", fmt_tok),
            "efficiency_source": ("efficiency from", None),
        }
    )
    note = (
        f"\n\nFrom MeCeFO's failure-free run at {PAPER_GBPS:g} GB/s (summary.json `clock`). efficiency: the "
        f"fraction of peak FLOP/s the compute runs at, calibrated so that failure-free MeCeFO (plain DP) matches "
        f"the paper's Table 2 tokens/s; implied MFU = FLOPs per worker step / (failure-free step s x peak)."
    )
    return to_markdown(t, cols) + note


def runs_markdown(runs: pd.DataFrame) -> str:
    if runs.empty:
        return "_no run folders found_"
    kept = runs[runs["selected"]]
    kept = kept.assign(words=[reading_words(r) for r in kept["reading"]])
    cols = {
        "status": ("status", None),
        "model": ("model", None),
        "method": ("method", None),
        "failure": ("failure", None),
        "reading": ("reading", None),
        "words": ("what it means", None),
        "inter_node_GBps": ("GB/s", fmt_g),
        "seed": ("seed", None),
        "throughput_tok_s": ("tok/s", fmt_tok),
        "error": ("error", None),
        "run_dir": ("run folder", None),
    }
    superseded = int((~runs["selected"]).sum())
    note = f"\n\n{superseded} superseded run(s) not shown (see runs_all.csv)." if superseded else ""
    return to_markdown(kept, cols) + note


# ------------------------------------------------------------------------ all of it
def make_tables(runs: pd.DataFrame, drops: Optional[pd.DataFrame] = None) -> Dict[str, pd.DataFrame]:
    drops = drop_table(runs) if drops is None else drops
    readings = table2_readings(drops)
    matrix, counts, _ = which_reading(readings)
    return {
        "table2_default": table2_default(runs),
        "table2_readings": readings,
        "which_reading": matrix,
        "which_reading_counts": counts,
        "memory": memory_table(runs),
        "clock": clock_table(runs),
    }


def write_tables(runs: pd.DataFrame, out, drops: Optional[pd.DataFrame] = None) -> List[Path]:
    """CSV (raw numbers, drops as fractions) and markdown of every table under <out>/tables/."""
    folder = Path(out) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    tables = make_tables(runs, drops)
    paths = []
    for name, table in tables.items():
        paths.append(folder / f"{name}.csv")
        table.to_csv(paths[-1], index=False)
    _, _, winners = which_reading(tables["table2_readings"])
    markdown = {
        "table2_default": (
            f"Throughput per method and failure level, reading {DEFAULT_READING}, {PAPER_GBPS:g} GB/s (paper Table 2)",
            throughput_markdown(tables["table2_default"])
            if not tables["table2_default"].empty
            else "_no finished runs_",
        ),
        "table2_readings": (
            "Drops at failure=high under each failure reading (paper Table 2)",
            readings_markdown(tables["table2_readings"]),
        ),
        "which_reading": (
            "Which failure reading reproduces the paper's Table 2",
            which_markdown(tables["which_reading"], tables["which_reading_counts"], winners),
        ),
        "memory": ("Peak memory per worker", memory_markdown(tables["memory"])),
        "clock": ("The calibrated clock per model", clock_markdown(tables["clock"])),
        "runs": ("Runs", runs_markdown(runs)),
    }
    for name, (title, body) in markdown.items():
        paths.append(folder / f"{name}.md")
        paths[-1].write_text(f"# {title}\n\n{body}\n")
    return paths


def analyze(sweep_dirs: Iterable, out, figures: bool = True, verbose: bool = True) -> Dict[str, List[Path]]:
    """Collect the sweep(s), write the run table, the study's tables and (figures=True) its figures;
    print what was found, naming every run that is in no table."""
    from . import paper_scale_figures  # matplotlib: only where figures are drawn
    from .study import run_study

    def collect_with_drops():
        runs = collect_study(sweep_dirs)
        return runs, drop_table(runs)

    def warn_problems(data):
        for line in problems(*data):
            log.warning("paper_scale: %s", line.strip())

    return run_study(
        out,
        collect_with_drops,
        lambda data, folder: {
            "table": write_table(data[0], folder).values(),
            "tables": write_tables(data[0], folder, data[1]),
        },
        lambda data, folder: paper_scale_figures.make_figures(data[0], data[1], folder),
        lambda data: describe(*data),
        draw=figures,
        verbose=verbose,
        quiet_describe=warn_problems,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.paper_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", help="sweep folders (or any folders holding run folders)")
    p.add_argument("--out", default=None, help="output folder (default: <first dir>/analysis)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    analyze(args.dirs, args.out or Path(args.dirs[0]) / "analysis", figures=not args.no_figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
