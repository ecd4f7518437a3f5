"""The paper's tables from the collected runs (CSV with raw numbers, markdown for reading).

Only runs that were kept by de-duplication and finished (`status == ok`) enter the
numbers; several seeds of one configuration are averaged (mean, and `n_seeds` says how
many). Runs are grouped by *setting* (model, n_workers, max_steps, micro_batch, seq_len),
so runs of different sizes are never averaged together.

(a) throughput.{csv,md}  paper Table 2. Committed tokens per simulated second per method,
    failure-free and at each failure level; drop_<level> = 1 - thr(level) / thr(none)
    (the ratio of the seed means); resilience_<level> = drop_<level>(method) /
    drop_<level>(mecefo) in the same setting, blank when MeCeFO's drop is not positive
    (a ratio to zero or to a gain says nothing). paper_* columns: see analysis/paper.py
    for which paper row a model is compared with.
(b) perplexity.{csv,md}  paper Table 3. Final validation perplexity and
    change_<level> = ppl(level) / ppl(none) - 1. The paper reports MeCeFO only.
(c) time_breakdown.{csv,md}  simulated seconds per category of summary.json's
    time_breakdown, their total and each category's share of it.
runs.md                 every kept run with its status (failed and incomplete ones included).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import pandas as pd

from . import paper
from .collect import FAILURE_ORDER, METHOD_ORDER, TIME_CATEGORIES, ok_runs

SETTING = ("model", "n_workers", "max_steps", "micro_batch", "seq_len")


# ------------------------------------------------------------------------ helpers
def failure_levels(values: Sequence) -> List[str]:
    """The failure levels present, paper order first (none, low, medium, high), then the rest."""
    present = [v for v in pd.unique(pd.Series(list(values))) if isinstance(v, str)]
    return [f for f in FAILURE_ORDER if f in present] + sorted(f for f in present if f not in FAILURE_ORDER)


def methods_present(values: Sequence) -> List[str]:
    present = [v for v in pd.unique(pd.Series(list(values))) if isinstance(v, str)]
    return [m for m in METHOD_ORDER if m in present] + sorted(m for m in present if m not in METHOD_ORDER)


def seed_means(runs: pd.DataFrame, columns: Sequence[str], keys: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """Mean of `columns` over seeds per `keys` (default: setting, method, failure), with n_seeds."""
    runs = ok_runs(runs)
    keys = list(keys) if keys is not None else [*SETTING, "method", "failure"]
    cols = [c for c in columns if c in runs]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "n_seeds", *cols])
    data = runs[keys + cols].copy()
    for c in cols:
        data[c] = pd.to_numeric(data[c], errors="coerce")
    grouped = data.groupby(keys, dropna=False, sort=False)
    out = grouped[cols].mean()
    out["n_seeds"] = grouped.size()
    return out.reset_index()


def _nan(v) -> float:
    return float("nan") if v is None else float(v)


def _settings(means: pd.DataFrame):
    return means.groupby(list(SETTING), dropna=False, sort=False)


def _order_rows(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    rank = {m: i for i, m in enumerate(METHOD_ORDER)}
    key = df["method"].map(lambda m: rank.get(m, len(rank)))
    return df.assign(_k=key).sort_values(["model", "_k", "method"], kind="stable").drop(columns="_k").reset_index(drop=True)


# ------------------------------------------------------------------------ (a) Table 2
def throughput_table(runs: pd.DataFrame) -> pd.DataFrame:
    means = seed_means(runs, ["throughput_tok_s"])
    levels = failure_levels(means["failure"])
    faulty = [f for f in levels if f != "none"]
    rows = []
    for setting, group in _settings(means):
        thr = group.pivot_table(index="method", columns="failure", values="throughput_tok_s", aggfunc="mean",
                                dropna=False)
        seeds = group.groupby("method")["n_seeds"].min()
        mecefo_drop = {}
        if "mecefo" in thr.index:
            for f in faulty:
                mecefo_drop[f] = _drop(thr, "mecefo", f)
        for method in methods_present(group["method"]):
            row = dict(zip(SETTING, setting))
            row["method"] = method
            row["n_seeds"] = int(seeds.get(method, 0))
            for f in levels:
                row[f"thr_{f}"] = thr.loc[method, f] if f in thr.columns else float("nan")
            for f in faulty:
                row[f"drop_{f}"] = _drop(thr, method, f)
            for f in faulty:
                md = mecefo_drop.get(f, float("nan"))
                d = row[f"drop_{f}"]
                row[f"resilience_{f}"] = d / md if (md > 0 and math.isfinite(md) and math.isfinite(d)) else float("nan")
            ref = paper.throughput(row["model"], method)
            row["paper_ref"] = paper.ref_label(row["model"])
            row["paper_thr_none"] = _nan(ref["none"])
            row["paper_thr_high"] = _nan(ref["high"])
            row["paper_drop_high"] = _nan(ref["drop_high"])
            row["paper_resilience_high"] = _nan(ref["resilience_high"])
            rows.append(row)
    return _order_rows(pd.DataFrame(rows))


def _drop(thr: pd.DataFrame, method: str, level: str) -> float:
    if "none" not in thr.columns or level not in thr.columns:
        return float("nan")
    base, under = thr.loc[method, "none"], thr.loc[method, level]
    if not (base > 0) or not math.isfinite(under):
        return float("nan")
    return 1.0 - under / base


# ------------------------------------------------------------------------ (b) Table 3
def perplexity_table(runs: pd.DataFrame) -> pd.DataFrame:
    means = seed_means(runs, ["final_val_ppl", "final_val_loss"])
    levels = failure_levels(means["failure"])
    faulty = [f for f in levels if f != "none"]
    rows = []
    for setting, group in _settings(means):
        ppl = group.pivot_table(index="method", columns="failure", values="final_val_ppl", aggfunc="mean",
                                dropna=False)
        seeds = group.groupby("method")["n_seeds"].min()
        for method in methods_present(group["method"]):
            row = dict(zip(SETTING, setting))
            row["method"] = method
            row["n_seeds"] = int(seeds.get(method, 0))
            for f in levels:
                row[f"ppl_{f}"] = ppl.loc[method, f] if f in ppl.columns else float("nan")
            base = row.get("ppl_none", float("nan"))
            for f in faulty:
                row[f"change_{f}"] = row[f"ppl_{f}"] / base - 1 if base > 0 else float("nan")
            row["paper_ref"] = paper.ref_label(row["model"])
            for f in FAILURE_ORDER:
                ref = paper.perplexity(row["model"], method, f)
                row[f"paper_ppl_{f}"] = _nan(ref["ppl"])
                if f != "none":
                    row[f"paper_change_{f}"] = _nan(ref["change"])
            rows.append(row)
    return _order_rows(pd.DataFrame(rows))


# ------------------------------------------------------------------------ (c) time
def time_breakdown_table(runs: pd.DataFrame) -> pd.DataFrame:
    cats = [c for c in TIME_CATEGORIES]
    extra = sorted(c[len("time_"):] for c in runs.columns
                   if c.startswith("time_") and c[len("time_"):] not in cats) if not runs.empty else []
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
    means = means.assign(_m=means["method"].map(lambda m: rank_m.get(m, len(rank_m))),
                         _f=means["failure"].map(lambda f: rank_f.get(f, len(rank_f))))
    means = means.sort_values(["model", "_m", "method", "_f"], kind="stable").drop(columns=["_m", "_f"])
    return means.reset_index(drop=True)


# ------------------------------------------------------------------------ markdown
def _fmt_tok(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v / 1e3:.1f}k" if abs(v) >= 1e3 else f"{v:.0f}"


def _fmt_pct(v, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v * 100:+.2f}%" if signed else f"{v * 100:.2f}%"


def _fmt_num(digits: int) -> Callable:
    def f(v) -> str:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return ""
        return f"{v:.{digits}f}"
    return f


def _fmt_ratio(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v:.2f}x"


def _has_values(col: pd.Series) -> bool:
    return bool(col.map(lambda v: not (v is None or (isinstance(v, float) and math.isnan(v)) or v == "")).any())


def to_markdown(df: pd.DataFrame, columns: Dict[str, tuple], drop_empty: bool = True) -> str:
    """A GitHub table: columns maps a df column to (header, formatter); columns empty in
    every row are left out (the CSV keeps them)."""
    cols = [c for c in columns if c in df]
    if drop_empty:  # a column blank in every row (a paper value that does not apply) says nothing
        cols = [c for c in cols if _has_values(df[c])]
    head = "| " + " | ".join(columns[c][0] for c in cols) + " |"
    sep = "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(df[c]) else "---" for c in cols) + "|"
    lines = [head, sep]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            fmt = columns[c][1]
            v = r[c]
            cells.append(fmt(v) if fmt else ("" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _setting_columns(df: pd.DataFrame) -> Dict[str, tuple]:
    """model always; the other setting columns only where they vary."""
    cols = {"model": ("model", None)}
    for c in SETTING[1:]:
        if c in df and df[c].nunique(dropna=False) > 1:
            cols[c] = (c, None)
    return cols


def _per_level_columns(t: pd.DataFrame, prefix: str):
    """The failure levels present (columns `<prefix><level>`), those with failures, and the
    leading setting/method/seeds columns every per-level table starts with."""
    levels = [c[len(prefix):] for c in t.columns if c.startswith(prefix)]
    faulty = [f for f in levels if f != "none"]
    cols = _setting_columns(t)
    cols.update({"method": ("method", None), "n_seeds": ("seeds", None)})
    return levels, faulty, cols


def throughput_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs_"
    levels, faulty, cols = _per_level_columns(t, "thr_")
    cols.update({f"thr_{f}": (f"tok/s {f}", _fmt_tok) for f in levels})
    cols.update({f"drop_{f}": (f"drop {f}", _fmt_pct) for f in faulty})
    cols.update({f"resilience_{f}": (f"drop/MeCeFO {f}", _fmt_ratio) for f in faulty})
    cols.update({"paper_thr_none": ("paper tok/s none", _fmt_tok), "paper_thr_high": ("paper tok/s high", _fmt_tok),
                 "paper_drop_high": ("paper drop high", _fmt_pct),
                 "paper_resilience_high": ("paper drop/MeCeFO high", _fmt_ratio)})
    refs = ", ".join(sorted(set(t["paper_ref"].astype(str))))
    note = (f"\n\nThroughput = committed tokens per simulated second (mean over seeds). "
            f"drop = 1 - thr(level)/thr(none); drop/MeCeFO = the method's drop over MeCeFO's at the same level "
            f"(the paper's 'resilience'). paper columns: MeCeFO paper Table 2, row {refs}; absolute tokens/s only "
            f"where the model is the paper's.")
    return to_markdown(t, cols) + note


def perplexity_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs_"
    levels, faulty, cols = _per_level_columns(t, "ppl_")
    cols.update({f"ppl_{f}": (f"ppl {f}", _fmt_num(2)) for f in levels})
    cols.update({f"change_{f}": (f"change {f}", lambda v: _fmt_pct(v, signed=True)) for f in faulty})
    cols.update({f"paper_ppl_{f}": (f"paper ppl {f}", _fmt_num(2)) for f in FAILURE_ORDER})
    cols.update({f"paper_change_{f}": (f"paper change {f}", lambda v: _fmt_pct(v, signed=True))
                 for f in FAILURE_ORDER if f != "none"})
    refs = ", ".join(sorted(set(t["paper_ref"].astype(str))))
    note = (f"\n\nFinal validation perplexity (mean over seeds); change = ppl(level)/ppl(none) - 1. "
            f"paper columns: MeCeFO paper Table 3 (MeCeFO only), row {refs}; the paper prints the change for high, "
            f"the low/medium changes are derived from its perplexities.")
    return to_markdown(t, cols) + note


def time_markdown(t: pd.DataFrame) -> str:
    if t.empty:
        return "_no finished runs_"
    cats = [c[len("share_"):] for c in t.columns if c.startswith("share_")]
    t = t.copy()
    for c in cats:
        t[f"cell_{c}"] = [f"{s:.3g} ({p * 100:.1f}%)" if math.isfinite(s) and math.isfinite(p) else ""
                          for s, p in zip(t[f"time_{c}"], t[f"share_{c}"])]
    cols = _setting_columns(t)
    cols.update({"method": ("method", None), "failure": ("failure", None), "n_seeds": ("seeds", None)})
    cols.update({f"cell_{c}": (c, None) for c in cats})
    cols["time_total"] = ("total s", _fmt_num(3))
    note = "\n\nSimulated seconds per category of summary.json's time_breakdown (share of the total), mean over seeds."
    return to_markdown(t, cols) + note


def runs_markdown(runs: pd.DataFrame) -> str:
    if runs.empty:
        return "_no run folders found_"
    kept = runs[runs["selected"]] if "selected" in runs else runs
    t = kept.copy()
    if "steps" not in t:
        t["steps"] = None
    if "steps_logged" in t:
        t["steps"] = t["steps"].where(t["steps"].notna(), t["steps_logged"])
    cols = {"status": ("status", None), "model": ("model", None), "method": ("method", None),
            "failure": ("failure", None), "seed": ("seed", None), "steps": ("steps", _fmt_int),
            "max_steps": ("max_steps", _fmt_int), "throughput_tok_s": ("tok/s", _fmt_tok),
            "final_val_ppl": ("val ppl", _fmt_num(2)), "error": ("error", None), "run_dir": ("run folder", None)}
    superseded = int((~runs["selected"]).sum()) if "selected" in runs else 0
    note = (f"\n\n{superseded} superseded run(s) not shown: an ok run of the same key replaced them "
            f"(see runs_all.csv)." if superseded else "")
    return to_markdown(t, cols) + note


def _fmt_int(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return ""
    return "" if not math.isfinite(f) else str(int(f))


# ------------------------------------------------------------------------ writing
def make_tables(runs: pd.DataFrame) -> Dict[str, pd.DataFrame]:
    return {"throughput": throughput_table(runs), "perplexity": perplexity_table(runs),
            "time_breakdown": time_breakdown_table(runs)}


def write_tables(runs: pd.DataFrame, out) -> Dict[str, Path]:
    """CSV + markdown of every table into <out>/tables/; returns the paths written."""
    folder = Path(out) / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    tables = make_tables(runs)
    render = {"throughput": throughput_markdown, "perplexity": perplexity_markdown, "time_breakdown": time_markdown}
    titles = {"throughput": "Throughput per method and failure level (paper Table 2)",
              "perplexity": "Final validation perplexity (paper Table 3)",
              "time_breakdown": "Simulated time breakdown"}
    paths: Dict[str, Path] = {}
    for name, table in tables.items():
        paths[f"{name}.csv"] = folder / f"{name}.csv"
        table.to_csv(paths[f"{name}.csv"], index=False)
        paths[f"{name}.md"] = folder / f"{name}.md"
        paths[f"{name}.md"].write_text(f"# {titles[name]}\n\n{render[name](table)}\n")
    paths["runs.md"] = folder / "runs.md"
    paths["runs.md"].write_text(f"# Runs\n\n{runs_markdown(runs)}\n")
    return paths
