"""The paper's tables from the collected runs (CSV with raw numbers, markdown for reading).

Only runs that were kept by de-duplication and finished (`status == ok`) enter the
numbers. Runs are grouped by *setting*: GROUPING = label, model, n_workers, max_steps,
micro_batch, seq_len, variant and failure_variant (analysis/collect.py: whatever else a
sweep changed), so runs of different configurations are never averaged together.

Statistics over seeds: every number that aggregates seeds is a mean with `<col>_ci95`,
the half-width of its 95% confidence interval (Student t with n-1 degrees of freedom;
blank for one seed), and `n_seeds`. A comparison with failure-free (drop, change) is
*paired*: it is computed per seed against the failure-free run of the same seed (same
data order, same initialisation; the fault trace is a function of the seed too), then
averaged, with the interval of the paired differences: seed-to-seed noise that both runs
share cancels. A failure-free run has no failure reading, so it is the baseline of every
`failure_variant` of its setting.

(a) throughput.{csv,md}  paper Table 2. Committed tokens per simulated second per method,
    failure-free and at each failure level; drop_<level> = mean over seeds of
    1 - thr(level) / thr(none) (paired); resilience_<level> = drop_<level>(method) /
    drop_<level>(mecefo) in the same setting, blank when MeCeFO's drop is not positive
    (a ratio to zero or to a gain says nothing). paper_* columns: see analysis/paper.py
    for which paper row a model is compared with.
(b) perplexity.{csv,md}  paper Table 3. Final validation perplexity and
    change_<level> = mean over seeds of ppl(level) / ppl(none) - 1 (paired). The paper
    reports MeCeFO only.
(c) time_breakdown.{csv,md}  simulated seconds per category of summary.json's
    time_breakdown, their total and each category's share of it.
runs.md                 every kept run with its status (failed and incomplete ones included).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import pandas as pd

from . import formats, paper
from .collect import FAILURE_ORDER, TIME_CATEGORIES, ok_runs
from .formats import ci_text, fmt_g3, fmt_int, fmt_num, fmt_pct, fmt_ratio, fmt_tok
from .methods import METHOD_ORDER

SETTING = ("model", "n_workers", "max_steps", "micro_batch", "seq_len")
#: what one table row's runs share besides method and failure level (see the module doc)
GROUPING = ("label", *SETTING, "variant", "failure_variant")
CONFIDENCE = 0.95


# ------------------------------------------------------------------------ helpers
def failure_levels(values: Sequence) -> List[str]:
    """The failure levels present, paper order first (none, low, medium, high), then the rest."""
    present = [v for v in pd.unique(pd.Series(list(values))) if isinstance(v, str)]
    return [f for f in FAILURE_ORDER if f in present] + sorted(f for f in present if f not in FAILURE_ORDER)


def methods_present(values: Sequence) -> List[str]:
    present = [v for v in pd.unique(pd.Series(list(values))) if isinstance(v, str)]
    return [m for m in METHOD_ORDER if m in present] + sorted(m for m in present if m not in METHOD_ORDER)


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple:
    """(mean, half-width of the Student-t confidence interval, n) of the finite values;
    the half-width is NaN below two values (one seed has no spread to show)."""
    from scipy import stats

    x = pd.to_numeric(pd.Series(list(values), dtype="float64"), errors="coerce")
    x = x[x.map(math.isfinite)]
    n = int(len(x))
    if n == 0:
        return float("nan"), float("nan"), 0
    mean = float(x.mean())
    if n < 2:
        return mean, float("nan"), n
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return mean, half, n


def with_grouping(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished, kept runs with the GROUPING columns present ("" where a table predates them),
    and each failure-free run copied into every failure_variant of its setting (a run without
    failures is the same whichever way failures would have been read)."""
    runs = ok_runs(runs).copy()
    for col in ("label", "variant", "failure_variant"):
        runs[col] = runs[col].fillna("").astype(str) if col in runs else ""
    if runs.empty:
        return runs
    base = [c for c in GROUPING if c != "failure_variant"]
    parts = []
    for _, group in runs.groupby(base, dropna=False, sort=False):
        free = group[group["failure"] == "none"]
        faulty = group[group["failure"] != "none"]
        readings = sorted(set(faulty["failure_variant"])) or [""]
        parts.append(faulty)
        parts.extend(free.assign(failure_variant=r) for r in readings)
    return pd.concat(parts, ignore_index=True)


def seed_means(runs: pd.DataFrame, columns: Sequence[str], keys: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Mean, `<col>_ci95` and n_seeds of `columns` over seeds per `keys` (default: GROUPING,
    method, failure)."""
    runs = with_grouping(runs) if keys is None else ok_runs(runs)
    keys = list(keys) if keys is not None else [*GROUPING, "method", "failure"]
    cols = [c for c in columns if c in runs]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "n_seeds", *cols, *(f"{c}_ci95" for c in cols)])
    rows = []
    for key, group in runs.groupby(keys, dropna=False, sort=False):
        row = dict(zip(keys, key))
        row["n_seeds"] = int(len(group))
        for c in cols:
            row[c], row[f"{c}_ci95"], _ = mean_ci(group[c])
        rows.append(row)
    return pd.DataFrame(rows)


def paired_changes(
    runs: pd.DataFrame, value: str, keys: Sequence[str], change: Callable[[float, float], float]
) -> Dict[tuple, Dict[str, tuple]]:
    """{key: {level: (mean, ci95 half-width, n pairs)}} of change(value at level, value
    failure-free) per seed: each run is compared with the failure-free run of its own seed
    (same keys), then the per-seed changes are averaged."""
    out: Dict[tuple, Dict[str, tuple]] = {}
    if runs.empty or value not in runs:
        return out
    data = runs.assign(_v=pd.to_numeric(runs[value], errors="coerce"))
    for key, group in data.groupby(list(keys), dropna=False, sort=False):
        base = group[group["failure"] == "none"].groupby("seed")["_v"].last()
        per_level: Dict[str, tuple] = {}
        for level, rows in group[group["failure"] != "none"].groupby("failure", sort=False):
            pairs = [change(v, base[s]) for s, v in zip(rows["seed"], rows["_v"]) if s in base.index]
            per_level[level] = mean_ci(pairs)
        out[key if isinstance(key, tuple) else (key,)] = per_level
    return out


def _relative_change(value: float, base: float) -> float:
    return value / base - 1 if base > 0 else float("nan")


def _drop(value: float, base: float) -> float:
    return 1 - value / base if base > 0 and math.isfinite(value) else float("nan")


def _nan(v) -> float:
    return float("nan") if v is None else float(v)


def _settings(means: pd.DataFrame):
    return means.groupby(list(GROUPING), dropna=False, sort=False)


def _order_rows(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    key = df["method"].map(lambda m: rank.get(m, len(rank)))
    return (
        df.assign(_k=key)
        .sort_values(["model", "_k", "method"], kind="stable")
        .drop(columns="_k")
        .reset_index(drop=True)
    )


# ------------------------------------------------------------------------ (a) Table 2
def _level_rows(
    runs: pd.DataFrame, value: str, prefix: str, change_prefix: str, change: Callable[[float, float], float]
) -> List[dict]:
    """One row per (setting, method): `<prefix><level>` mean and ci95 over seeds, and the
    paired `<change_prefix><level>` against failure-free with its ci95 and pair count."""
    runs = with_grouping(runs)
    means = seed_means(runs, [value], keys=[*GROUPING, "method", "failure"])  # grouped once, above
    levels = failure_levels(means["failure"])
    paired = paired_changes(runs, value, [*GROUPING, "method"], change)
    rows = []
    for setting, group in _settings(means):
        for method in methods_present(group["method"]):
            mine = group[group["method"] == method].set_index("failure")
            row = dict(zip(GROUPING, setting))
            row["method"] = method
            row["n_seeds"] = int(mine["n_seeds"].min())
            for f in levels:
                row[f"{prefix}{f}"] = mine[value].get(f, float("nan"))
                row[f"{prefix}{f}_ci95"] = mine[f"{value}_ci95"].get(f, float("nan"))
            changes = paired.get((*setting, method), {})
            for f in levels:
                if f != "none":
                    mean, half, n = changes.get(f, (float("nan"), float("nan"), 0))
                    row[f"{change_prefix}{f}"], row[f"{change_prefix}{f}_ci95"] = mean, half
                    row[f"{change_prefix}{f}_pairs"] = n
            rows.append(row)
    return rows


def throughput_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = _level_rows(runs, "throughput_tok_s", "thr_", "drop_", _drop)
    faulty = [f for f in failure_levels(ok_runs(runs)["failure"]) if f != "none"] if not runs.empty else []
    reference = {tuple(r[c] for c in GROUPING): r for r in rows if r["method"] == paper.METHOD}
    for row in rows:
        ref_row = reference.get(tuple(row[c] for c in GROUPING), {})
        for f in faulty:
            md, d = ref_row.get(f"drop_{f}", float("nan")), row.get(f"drop_{f}", float("nan"))
            row[f"resilience_{f}"] = d / md if (md > 0 and math.isfinite(md) and math.isfinite(d)) else float("nan")
        ref = paper.throughput(row["model"], row["method"])
        row["paper_ref"] = paper.ref_label(row["model"])
        row["paper_thr_none"] = _nan(ref["none"])
        row["paper_thr_high"] = _nan(ref["high"])
        row["paper_drop_high"] = _nan(ref["drop_high"])
        row["paper_resilience_high"] = _nan(ref["resilience_high"])
    return _order_rows(pd.DataFrame(rows))


# ------------------------------------------------------------------------ (b) Table 3
def perplexity_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = _level_rows(runs, "final_val_ppl", "ppl_", "change_", _relative_change)
    run_levels = set(failure_levels(ok_runs(runs)["failure"])) if not runs.empty else set()
    for row in rows:
        row["paper_ref"] = paper.ref_label(row["model"])
        for f in [f for f in FAILURE_ORDER if f in run_levels]:  # the paper's columns only beside levels run
            ref = paper.perplexity(row["model"], row["method"], f)
            row[f"paper_ppl_{f}"] = _nan(ref["ppl"])
            if f != "none":
                row[f"paper_change_{f}"] = _nan(ref["change"])
    return _order_rows(pd.DataFrame(rows))


# ------------------------------------------------------------------------ (c) time
def time_breakdown_table(runs: pd.DataFrame) -> pd.DataFrame:
    cats = [c for c in TIME_CATEGORIES]
    extra = (
        sorted(c[len("time_") :] for c in runs.columns if c.startswith("time_") and c[len("time_") :] not in cats)
        if not runs.empty
        else []
    )
    cats += extra
    means = seed_means(runs, [f"time_{c}" for c in cats] + ["sim_time_s"])
    if means.empty:
        return means
    present = [c for c in cats if f"time_{c}" in means]
    means["time_total"] = means[[f"time_{c}" for c in present]].sum(axis=1, min_count=1)
    for c in present:
        means[f"share_{c}"] = means[f"time_{c}"] / means["time_total"]
    rank_f = {f: i for i, f in enumerate(failure_levels(means["failure"]))}
    rank_m = {m: i for i, m in enumerate(METHOD_ORDER)}
    means = means.assign(
        _m=means["method"].map(lambda m: rank_m.get(m, len(rank_m))),
        _f=means["failure"].map(lambda f: rank_f.get(f, len(rank_f))),
    )
    means = means.sort_values(["model", "_m", "method", "_f"], kind="stable").drop(columns=["_m", "_f"])
    return means.reset_index(drop=True)


# ------------------------------------------------------------------------ markdown


def _has_values(col: pd.Series) -> bool:
    return bool(col.map(lambda v: not (v is None or (isinstance(v, float) and math.isnan(v)) or v == "")).any())


def shown(df: pd.DataFrame, columns: Dict[str, tuple], drop_empty: bool = True) -> pd.DataFrame:
    """The table as a reader sees it: `columns` maps a df column to (header, formatter); the
    result has one text cell per value under its header. Columns empty in every row are left
    out (the CSV keeps them)."""
    cols = [c for c in columns if c in df]
    if drop_empty:  # a column blank in every row (a paper value that does not apply) says nothing
        cols = [c for c in cols if _has_values(df[c])]

    def cell(fmt, v) -> str:
        return fmt(v) if fmt else ("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))

    # built by position: two columns may share a header (memory's three "fits"), which a dict keyed
    # by header would fold into one
    text = pd.DataFrame({i: [cell(columns[c][1], v) for v in df[c]] for i, c in enumerate(cols)}, index=df.index)
    text.columns = [columns[c][0] for c in cols]
    # numbers right-aligned, and the "mean ± half-width" text of with_ci_cells too
    text.attrs["right"] = [bool(pd.api.types.is_numeric_dtype(df[c])) or c.startswith("cell_") for c in cols]
    return text


def to_markdown(df: pd.DataFrame, columns: Dict[str, tuple], drop_empty: bool = True) -> str:
    """A GitHub table of `shown(df, columns, drop_empty)`."""
    text = shown(df, columns, drop_empty)
    lines = [
        "| " + " | ".join(text.columns) + " |",
        "|" + "|".join("---:" if right else "---" for right in text.attrs["right"]) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in text.itertuples(index=False)]
    return "\n".join(lines)


def setting_columns(df: pd.DataFrame) -> Dict[str, tuple]:
    """model always; the other setting columns only where they vary; label, variant and
    failure_variant wherever one is set."""
    cols = {"label": ("label", None)} if "label" in df and _has_values(df["label"]) else {}
    cols["model"] = ("model", None)
    for c in SETTING[1:]:
        if c in df and df[c].nunique(dropna=False) > 1:
            cols[c] = (c, None)
    for c, head in (("variant", "variant"), ("failure_variant", "under failures")):
        if c in df and _has_values(df[c]):
            cols[c] = (head, None)
    return cols


def with_ci_cells(t: pd.DataFrame, columns: Sequence[str], fmt: Callable) -> pd.DataFrame:
    """Copies of `columns` as text "mean ± half-width" (the half-width of `<col>_ci95`, left
    out for one seed), in columns named `cell_<col>`."""
    t = t.copy()
    for c in columns:
        half = t[f"{c}_ci95"] if f"{c}_ci95" in t else pd.Series(float("nan"), index=t.index)
        t[f"cell_{c}"] = [ci_text(v, h, fmt) for v, h in zip(t[c], half)]
    return t


def _per_level_columns(t: pd.DataFrame, prefix: str):
    """The failure levels present (columns `<prefix><level>`), those with failures, and the
    leading setting/method/seeds columns every per-level table starts with."""
    levels = [c[len(prefix) :] for c in t.columns if c.startswith(prefix) and not c.endswith("_ci95")]
    faulty = [f for f in levels if f != "none"]
    cols = setting_columns(t)
    cols.update({"method": ("method", None), "n_seeds": ("seeds", None)})
    return levels, faulty, cols


def throughput_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs_"
    view, cols, note = throughput_view(t)
    return to_markdown(view, cols) + note


def throughput_view(t: pd.DataFrame):
    """(table with its display cells, columns to show, note under the table)"""
    levels, faulty, cols = _per_level_columns(t, "thr_")
    t = with_ci_cells(t, [f"thr_{f}" for f in levels], fmt_tok)
    t = with_ci_cells(t, [f"drop_{f}" for f in faulty], fmt_pct)
    cols.update({f"cell_thr_{f}": (f"tok/s {f}", None) for f in levels})
    cols.update({f"cell_drop_{f}": (f"drop {f}", None) for f in faulty})
    cols.update({f"resilience_{f}": (f"drop/MeCeFO {f}", fmt_ratio) for f in faulty})
    cols.update(
        {
            "paper_thr_none": ("paper tok/s none", fmt_tok),
            "paper_thr_high": ("paper tok/s high", fmt_tok),
            "paper_drop_high": ("paper drop high", fmt_pct),
            "paper_resilience_high": ("paper drop/MeCeFO high", fmt_ratio),
        }
    )
    refs = ", ".join(sorted(set(t["paper_ref"].astype(str))))
    note = (
        f"\n\nThroughput = committed tokens per simulated second, mean ± 95% CI half-width over seeds "
        f"(Student t; no ± for one seed); drop paired per seed with the failure-free run. "
        f"drop = 1 - thr(level)/thr(none); drop/MeCeFO = the method's drop over MeCeFO's at the same level "
        f"(the paper's 'resilience'). paper columns: MeCeFO paper Table 2, row {refs}; absolute tokens/s only "
        f"where the model is the paper's."
    )
    return t, cols, note


def perplexity_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs_"
    view, cols, note = perplexity_view(t)
    return to_markdown(view, cols) + note


def perplexity_view(t: pd.DataFrame):
    """(table with its display cells, columns to show, note under the table)"""
    levels, faulty, cols = _per_level_columns(t, "ppl_")
    t = with_ci_cells(t, [f"ppl_{f}" for f in levels], fmt_num(2))
    t = with_ci_cells(t, [f"change_{f}" for f in faulty], lambda v: fmt_pct(v, signed=True))
    cols.update({f"cell_ppl_{f}": (f"ppl {f}", None) for f in levels})
    cols.update({f"cell_change_{f}": (f"change {f}", None) for f in faulty})
    cols.update({f"paper_ppl_{f}": (f"paper ppl {f}", fmt_num(2)) for f in FAILURE_ORDER})
    cols.update(
        {
            f"paper_change_{f}": (f"paper change {f}", lambda v: fmt_pct(v, signed=True))
            for f in FAILURE_ORDER
            if f != "none"
        }
    )
    refs = ", ".join(sorted(set(t["paper_ref"].astype(str))))
    note = (
        f"\n\nFinal validation perplexity, mean ± 95% CI half-width over seeds (Student t; no ± for one "
        f"seed); change = ppl(level)/ppl(none) - 1 per seed against the failure-free run of the same seed, "
        f"then averaged (paired). "
        f"paper columns: MeCeFO paper Table 3 (MeCeFO only), row {refs}; the paper prints the change for high, "
        f"the low/medium changes are derived from its perplexities."
    )
    return t, cols, note


def time_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs_"
    view, cols, note = time_view(t)
    return to_markdown(view, cols) + note


def time_view(t: pd.DataFrame):
    """(table with its display cells, columns to show, note under the table)"""
    cats = [c[len("share_") :] for c in t.columns if c.startswith("share_")]
    t = t.copy()
    for c in cats:
        half = t[f"time_{c}_ci95"] if f"time_{c}_ci95" in t else [float("nan")] * len(t)
        t[f"cell_{c}"] = [
            f"{ci_text(s, h, fmt_g3)} ({p * 100:.1f}%)" if math.isfinite(s) and math.isfinite(p) else ""
            for s, h, p in zip(t[f"time_{c}"], half, t[f"share_{c}"])
        ]
    cols = setting_columns(t)
    cols.update({"method": ("method", None), "failure": ("failure", None), "n_seeds": ("seeds", None)})
    cols.update({f"cell_{c}": (c, None) for c in cats})
    cols["time_total"] = ("total s", fmt_num(3))
    note = (
        "\n\nSimulated seconds per category of summary.json's time_breakdown (share of the total), "
        "mean ± 95% CI half-width over seeds."
    )
    return t, cols, note


def runs_markdown(runs: pd.DataFrame) -> str:
    if runs.empty:
        return "_no run folders found_"
    kept = runs[runs["selected"]] if "selected" in runs else runs
    t = kept.copy()
    if "steps" not in t:
        t["steps"] = None
    if "steps_logged" in t:
        t["steps"] = t["steps"].where(t["steps"].notna(), t["steps_logged"])
    cols = {
        "status": ("status", None),
        "model": ("model", None),
        "method": ("method", None),
        "failure": ("failure", None),
        "seed": ("seed", None),
        "steps": ("steps", fmt_int),
        "max_steps": ("max_steps", fmt_int),
        "throughput_tok_s": ("tok/s", fmt_tok),
        "final_val_ppl": ("val ppl", fmt_num(2)),
        "error": ("error", None),
        "run_dir": ("run folder", None),
    }
    superseded = int((~runs["selected"]).sum()) if "selected" in runs else 0
    note = (
        f"\n\n{superseded} superseded run(s) not shown: an ok run of the same key replaced them (see runs_all.csv)."
        if superseded
        else ""
    )
    if "run_dir" in t:
        t["run_dir"] = relative_folders(t["run_dir"])
        note += "\n\nRun folders are relative to the folder the runs were collected from."
    return to_markdown(t, cols) + note


def relative_folders(folders: pd.Series) -> pd.Series:
    """Run folders relative to their common parent: a table names runs, not this machine's paths."""
    import os

    paths = [str(f) for f in folders if isinstance(f, str) and f]
    if not paths:
        return folders
    common = os.path.commonpath(paths)
    if common in paths:  # one run, or a run folder holding the others: name it too
        common = os.path.dirname(common)
    return folders.map(lambda f: os.path.relpath(f, common) if isinstance(f, str) and f else f)


# ------------------------------------------------------------------------ writing
def make_tables(runs: pd.DataFrame) -> Dict[str, pd.DataFrame]:
    return {
        "throughput": throughput_table(runs),
        "perplexity": perplexity_table(runs),
        "time_breakdown": time_breakdown_table(runs),
    }


def write_tables(runs: pd.DataFrame, out) -> Dict[str, Path]:
    """Every table into <out>/tables/ as <name>.csv (raw numbers), <name>.md (for reading) and
    <name>.tex (booktabs, the same cells as the markdown, its note as the caption); returns
    the paths written."""
    folder = Path(out) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    tables = make_tables(runs)
    views = {"throughput": throughput_view, "perplexity": perplexity_view, "time_breakdown": time_view}
    titles = {
        "throughput": "Throughput per method and failure level (paper Table 2)",
        "perplexity": "Final validation perplexity (paper Table 3)",
        "time_breakdown": "Simulated time breakdown",
    }
    paths: Dict[str, Path] = {}
    for name, table in tables.items():
        if table.empty:
            text, note = None, "_no finished runs_"
        else:
            view, cols, note = views[name](table)
            text = shown(view, cols)
        markdown = note if text is None else to_markdown(view, cols) + note
        paths.update(formats.write_formats(table, folder, name, titles[name], markdown=markdown, formats=("csv", "md")))
        paths[f"{name}.tex"] = folder / f"{name}.tex"
        paths[f"{name}.tex"].write_text(
            "% no finished runs\n"
            if text is None
            else formats.to_latex(
                text,
                caption=f"{titles[name]}. {note.strip()}",
                label=f"tab:{name}",
                escape_caption=True,
                column_format="".join("r" if right else "l" for right in text.attrs["right"]),
            )
        )
    paths["runs.md"] = folder / "runs.md"
    paths["runs.md"].write_text(f"# Runs\n\n{runs_markdown(runs)}\n")
    return paths
