"""The convergence study (paper Table 3): MeCeFO's perplexity change against failure-free,
per failure level, run length and failure reading, with confidence intervals over seeds.

    python -m analysis.convergence runs/sweeps/paper_table3 --out runs/sweeps/paper_table3/analysis

Input: a sweep of conf/experiment/paper_table3.yaml (or any sweep of MeCeFO runs that
varies trainer.max_steps and failure levels). Every change is *paired*: each seed's run
under failures against the failure-free run of the same seed and length (analysis/
tables.py), then averaged over seeds with a Student-t 95% interval.

Writes, besides what `python -m analysis` writes (run table, tables, figures):
  tables/convergence.{csv,md}  one row per (reading, level), a column per run length:
                               change mean ± CI (pairs), beside the paper's change
  figures/convergence.{png,pdf}  the change against run length, a panel per reading
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import pandas as pd

from . import paper
from .collect import collect, describe, write_table
from .formats import ci_text, fmt_pct
from .tables import FAILURE_ORDER, perplexity_table, to_markdown

log = logging.getLogger(__name__)

#: the paper's MeCeFO perplexity changes (Table 3): the 1B row at every level (printed at
#: high, derived from the printed perplexities below it), and the 350M / 7B rows at high
PAPER_CHANGE_1B = {f: paper.perplexity("llama_1b", paper.METHOD, f)["change"] for f in ("low", "medium", "high")}
PAPER_CHANGE_HIGH = {row: pct / 100 for row, pct in paper.TABLE3_HIGH_CHANGE_PCT.items()}


def reading_name(failure_variant: str) -> str:
    """'' -> the preset's reading; 'failure.repair=replace,failure.replace_s=120' -> 'repair=replace, replace_s=120'."""
    if not failure_variant:
        return "preset (per worker, fixed repair)"
    parts = [part.split(".", 1)[-1] for part in failure_variant.split(",")]
    if "repair=replace" not in parts:  # replace_s means nothing to the other repairs
        parts = [p for p in parts if not p.startswith("replace_s=")]
    return ", ".join(parts)


def convergence_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Long format: reading, level, max_steps, change (mean over seeds of the paired change),
    change_ci95, pairs, and the paper's 1B change at that level."""
    t = perplexity_table(runs)
    if t.empty:
        return pd.DataFrame(columns=["model", "reading", "level", "max_steps", "change", "change_ci95", "pairs"])
    t = t[t["method"] == paper.METHOD]
    rows = []
    for _, r in t.iterrows():
        for level in FAILURE_ORDER[1:]:
            if f"change_{level}" not in r or not math.isfinite(r[f"change_{level}"]):
                continue
            rows.append(
                {
                    "label": r.get("label", ""),
                    "model": r["model"],
                    "variant": r.get("variant", ""),
                    "reading": reading_name(r.get("failure_variant", "")),
                    "level": level,
                    "max_steps": int(r["max_steps"]),
                    "change": r[f"change_{level}"],
                    "change_ci95": r[f"change_{level}_ci95"],
                    "pairs": int(r[f"change_{level}_pairs"]),
                    "ppl_none": r["ppl_none"],
                    "paper_change_1b": PAPER_CHANGE_1B[level],
                }
            )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    rank = {f: i for i, f in enumerate(FAILURE_ORDER)}
    return (
        out.assign(_l=out["level"].map(rank))
        .sort_values(["label", "model", "variant", "reading", "_l", "max_steps"])
        .drop(columns="_l")
        .reset_index(drop=True)
    )


def convergence_markdown(long: pd.DataFrame) -> str:
    if long.empty:
        return "_no MeCeFO runs with a failure-free partner_"
    keys = [c for c in ("label", "model", "variant") if c in long and long[c].nunique() > 1]
    lengths = sorted(long["max_steps"].unique())
    rows = []
    for key, group in long.groupby([*keys, "reading", "level"], sort=False):
        row = dict(zip([*keys, "reading", "level"], key if isinstance(key, tuple) else (key,)))
        for _, r in group.iterrows():
            cell = ci_text(r["change"], r["change_ci95"], lambda v: fmt_pct(v, signed=True))
            row[f"steps_{r['max_steps']}"] = f"{cell} ({r['pairs']})"
        row["paper_1b"] = fmt_pct(PAPER_CHANGE_1B[row["level"]], signed=True)
        rows.append(row)
    table = pd.DataFrame(rows)
    cols = {k: (k, None) for k in keys}
    cols.update({"reading": ("failure reading", None), "level": ("level", None)})
    cols.update({f"steps_{n}": (f"{n} steps", None) for n in lengths})
    cols["paper_1b"] = ("paper 1B", None)
    others = ", ".join(f"{row} {v * 100:+.2f}%" for row, v in PAPER_CHANGE_HIGH.items() if row != "1B")
    note = (
        f"\n\nFinal validation perplexity of MeCeFO under failures against failure-free, per seed against the "
        f"failure-free run of the same seed and length, then mean ± 95% CI half-width over seeds (Student t); "
        f"(n) = seeds paired. Paper (Table 3): 1B printed at high, derived from its perplexities at low/medium; "
        f"at high the paper also reports {others}."
    )
    return to_markdown(table, cols, drop_empty=False) + note


def convergence_figure(long: pd.DataFrame):
    """The change against run length, a panel per reading, a line per level with 95% error bars;
    the paper's 1B change per level as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import failure_color

    if long.empty:
        return None
    readings = list(dict.fromkeys(long["reading"]))
    fig, axes = plt.subplots(1, len(readings), figsize=(5.2 * len(readings), 4.0), squeeze=False, sharey=True)
    for ax, reading in zip(axes[0], readings):
        sub = long[long["reading"] == reading]
        for level in [f for f in FAILURE_ORDER[1:] if f in set(sub["level"])]:
            lv = sub[sub["level"] == level].sort_values("max_steps")
            err = lv["change_ci95"].fillna(0).to_numpy() * 100
            ax.errorbar(
                lv["max_steps"],
                lv["change"] * 100,
                yerr=err,
                marker="o",
                capsize=3,
                linewidth=1.5,
                color=failure_color(level),
                label=f"failure = {level}",
            )
            ax.axhline(PAPER_CHANGE_1B[level] * 100, color=failure_color(level), linestyle="--", linewidth=1, alpha=0.8)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xscale("log")
        ax.set_xticks(sorted(sub["max_steps"].unique()), [str(n) for n in sorted(sub["max_steps"].unique())])
        ax.set_xlabel("run length (optimizer steps)")
        ax.set_title(reading, fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[0, 0].set_ylabel("val ppl change vs failure-free (%)\nmean over seeds, 95% CI")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    from matplotlib.lines import Line2D

    handles.append(Line2D([], [], color="0.3", linestyle="--"))
    labels.append("paper Table 3, LLaMA-1B")
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle("MeCeFO: perplexity change against run length", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def analyze(
    roots: Iterable, out, figures: bool = True, verbose: bool = True, labels: Optional[Dict[str, Sequence]] = None
) -> Dict[str, List[Path]]:
    """The default analysis (analysis.figures) plus the convergence table and figure."""

    from .plots import make_figures, save
    from .study import run_study
    from .tables import write_tables

    def collect_with_convergence():
        runs = collect([Path(r) for r in roots], labels=labels)
        return runs, convergence_table(runs)

    def tables(data, out):
        runs, long = data
        folder = out / "tables"
        folder.mkdir(parents=True, exist_ok=True)
        long.to_csv(folder / "convergence.csv", index=False)
        md = convergence_markdown(long)
        (folder / "convergence.md").write_text(
            f"# MeCeFO perplexity change against run length (paper Table 3)\n\n{md}\n"
        )
        return {
            "table": write_table(runs, out).values(),
            "tables": [*write_tables(runs, out).values(), folder / "convergence.csv", folder / "convergence.md"],
        }

    def figures_of(data, out):
        runs, long = data
        fig = convergence_figure(long)
        return make_figures(runs, out) + (save(fig, out, "convergence") if fig is not None else [])

    return run_study(
        out,
        collect_with_convergence,
        tables,
        figures_of,
        lambda data: describe(data[0]) + "\n" + convergence_markdown(data[1]),
        draw=figures,
        verbose=verbose,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .collect import parse_analysis_args

    args, roots, labels = parse_analysis_args(
        "python -m analysis.convergence", __doc__, "sweep folders (e.g. runs/sweeps/paper_table3)", argv
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    analyze(roots, args.out, figures=not args.no_figures, labels=labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
