"""Figures from the collected runs (matplotlib, Agg backend; PNG + PDF each).

One file per figure and per setting (model, n_workers, max_steps, micro_batch, seq_len;
the file name carries the model, and the rest only when one model was run in several
settings):

    ppl_vs_step_<tag>        validation perplexity vs optimizer step, a panel per failure level
    ppl_vs_time_<tag>        ... vs simulated time, with the workers-down timeline under it
    throughput_<tag>         tokens per simulated second, and the drop against failure-free
    time_breakdown_<tag>     stacked simulated seconds per category, a panel per failure level
    grad_error_<tag>         MeCeFO's relative gradient error over training (if logged)

Every function takes the collected table (analysis.collect) and reads the curves from the
run folders named in its run_dir column; the notebook analysis/paper.ipynb calls the same
functions.
"""

from __future__ import annotations

import hashlib
import logging
import math
import sys
from pathlib import Path
from typing import List, Optional

import matplotlib

if "ipykernel" not in sys.modules:  # a notebook keeps its inline backend; everywhere else: no display needed
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from . import paper
from .collect import load_eval, load_grad_error, ok_runs, workers_down
from .formats import thousands
from .methods import METHOD_COLORS, METHOD_LABELS, METHOD_MARKERS
from .tables import (
    CONFIDENCE,
    GROUPING,
    failure_levels,
    methods_present,
    throughput_table,
    with_grouping,
)

log = logging.getLogger(__name__)

EXTRA_COLORS = ["tab:brown", "tab:pink", "tab:olive", "tab:cyan", "black"]
FAILURE_COLORS = {"none": "#8c8c8c", "low": "#f4c542", "medium": "#ef8a2c", "high": "#c0392b"}
CATEGORY_COLORS = {
    "compute": "#4c72b0",
    "comm": "#8fb3de",
    "ft_overhead": "#55a868",
    "lost_work": "#c44e52",
    "stall": "#8172b2",
    "degraded_extra": "#dd8452",
}
CATEGORY_LABELS = {
    "compute": "compute",
    "comm": "all-reduce",
    "ft_overhead": "fault-tolerance overhead",
    "lost_work": "lost / redone work",
    "stall": "stall (detect, restart, reconfigure)",
    "degraded_extra": "degraded-mode slowdown",
}


def method_marker(method: str) -> str:
    return METHOD_MARKERS.get(method, "X")


def method_color(method: str) -> str:
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return EXTRA_COLORS[sum(map(ord, str(method))) % len(EXTRA_COLORS)]


def failure_color(level: str) -> str:
    return FAILURE_COLORS.get(level, "tab:cyan")


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, str(method))


def tick_label(method: str, width: int = 11) -> str:
    """A method's label on two lines where it is long ("JIT\ncheckpointing"): seven of them side by
    side under one axis run into each other on one line."""
    import textwrap

    return "\n".join(textwrap.wrap(method_label(method), width, break_long_words=False)) or method_label(method)


# ------------------------------------------------------------------------ settings
def settings(runs: pd.DataFrame) -> List[tuple]:
    """(tag, runs of that setting) for every setting among the finished runs."""
    runs = with_grouping(runs)
    if runs.empty:
        return []
    groups = list(runs.groupby(list(GROUPING), dropna=False, sort=True))
    models = [dict(zip(GROUPING, g[0]))["model"] for g in groups]
    out = []
    for key, group in groups:
        vals = dict(zip(GROUPING, key))
        model = str(vals["model"])
        tag = model
        if models.count(vals["model"]) > 1:
            tag = (
                f"{model}_w{_int(vals['n_workers'])}_s{_int(vals['max_steps'])}"
                f"_b{_int(vals['micro_batch'])}_l{_int(vals['seq_len'])}"
            )
            extra = "|".join(str(vals[c]) for c in ("label", "variant", "failure_variant") if vals[c])
            if extra:  # a short stable name for what else the sweep varied (the title spells it out)
                tag += "_" + (vals["label"] or "v") + "_" + hashlib.sha1(extra.encode()).hexdigest()[:6]
        out.append((tag, group))
    return out


def not_shown(runs: pd.DataFrame, group: pd.DataFrame) -> str:
    """A line naming the runs of this setting that are not drawn because they did not finish."""
    if runs.empty or group.empty or "status" not in runs:
        return ""
    kept = runs[runs["selected"]] if "selected" in runs else runs
    first = group.iloc[0]
    same = pd.Series(True, index=kept.index)
    for c in GROUPING:
        if c in kept and c != "failure_variant":  # a failure-free run is shared by every reading
            same &= kept[c].fillna("").astype(str) == str(first[c])
    bad = kept[same & (kept["status"] != "ok")]
    if bad.empty:
        return ""
    items = [f"{r['method']}/{r['failure']}/seed {r['seed']} ({r['status']})" for _, r in bad.iterrows()]
    return "not shown, did not finish: " + ", ".join(items)


def _int(v) -> str:
    try:
        return str(int(v))
    except (TypeError, ValueError):
        return "na"


def setting_title(tag: str, group: pd.DataFrame) -> str:
    r = group.iloc[0]
    extra = ", ".join(str(r.get(c)) for c in ("label", "variant", "failure_variant") if r.get(c))
    return (
        f"{r['model']}, {_int(r['n_workers'])} workers, {_int(r['max_steps'])} steps, "
        f"micro-batch {_int(r['micro_batch'])} x {_int(r['seq_len'])} tokens" + (f"\n{extra}" if extra else "")
    )


def save(fig, out, name: str) -> List[Path]:
    """<out>/figures/<name>.png and .pdf"""
    folder = Path(out) / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def _legend_below(fig, handles, labels, ncol: Optional[int] = None) -> None:
    uniq = dict(zip(labels, handles))
    if not uniq:
        return
    fig.legend(
        list(uniq.values()),
        list(uniq.keys()),
        loc="lower center",
        ncol=ncol or min(6, len(uniq)),
        frameon=False,
        bbox_to_anchor=(0.5, -0.01),
    )


# ------------------------------------------------------------------------ curves
def ppl_curves(
    group: pd.DataFrame,
    x: str = "step",
    timeline: Optional[bool] = None,
    title: str = "",
    relative: Optional[bool] = None,
):
    """Validation perplexity vs `x` ("step" or "sim_time_s"), a panel per failure level and a
    line per method (one per seed). With timeline (default for sim_time_s): the number of
    workers down over simulated time under each panel, a line per method. With relative
    (default for step): under each panel, the change of perplexity against the same
    method's failure-free run (same seed, same step) in percent: the algorithmic effect of
    the failures, zero for the exact methods."""
    group = ok_runs(group)
    levels = failure_levels(group["failure"]) or ["none"]
    timeline = (x == "sim_time_s") if timeline is None else timeline
    relative = (x == "step" and not timeline) if relative is None else (relative and not timeline)
    rows = 2 if (timeline or relative) else 1
    fig, axes = plt.subplots(
        rows,
        len(levels),
        figsize=(3.6 * len(levels) + 0.6, 4.6 if rows == 2 else 3.6),
        squeeze=False,
        sharey="row",
        sharex="col",
        gridspec_kw={"height_ratios": [3, 1.3]} if rows == 2 else None,
    )
    baseline = {}
    if relative:
        for _, run in group[group["failure"] == "none"].iterrows():
            ev = load_eval(run["run_dir"])
            if not ev.empty and "val_ppl" in ev:
                baseline[(run["method"], run["seed"])] = ev.set_index("step")["val_ppl"]
    rel_seen = False
    handles, labels = [], []
    all_ppl = []
    max_down = 1
    methods = methods_present(group["method"])
    # exact methods give identical curves and a sweep shares one trace: methods drawn
    # earlier get wider lines and bigger markers, so that every one stays visible
    step_w = min(0.8, 2.4 / max(1, len(methods)))
    widths = {m: 1.1 + step_w * (len(methods) - 1 - i) for i, m in enumerate(methods)}
    for j, level in enumerate(levels):
        ax = axes[0, j]
        sub = group[group["failure"] == level]
        for method in methods:
            style = dict(color=method_color(method), marker=method_marker(method))
            curves, changes = [], []
            for _, run in sub[sub["method"] == method].iterrows():
                ev = load_eval(run["run_dir"])
                if ev.empty or x not in ev or "val_ppl" not in ev:
                    continue
                curves.append(ev.set_index(x)["val_ppl"])
                all_ppl.extend(ev["val_ppl"].dropna().tolist())
                base = baseline.get((method, run["seed"]))
                if relative and base is not None:
                    common = ev[ev["step"].isin(base.index)]
                    changes.append(
                        pd.Series(
                            (common["val_ppl"].to_numpy() / base.loc[common["step"]].to_numpy() - 1) * 100,
                            index=common["step"].to_numpy(),
                        )
                    )
                if timeline:
                    end = run.get("sim_time_s")
                    end = float(ev[x].iloc[-1]) if end is None or not math.isfinite(float(end)) else float(end)
                    down = workers_down(run["run_dir"], until=end)
                    axes[1, j].step(
                        down["time_s"],
                        down["down"],
                        where="post",
                        color=method_color(method),
                        linewidth=0.4 + 0.6 * widths[method],
                        alpha=0.85,
                    )
                    max_down = max(max_down, int(down["down"].max()))
            if not curves:
                continue
            # by step, seeds share their x values: the mean with its 95% band; by simulated
            # time they do not (each seed has its own failures), so each seed is a line
            h = draw_seeds(
                ax,
                curves,
                average=(x == "step"),
                linewidth=widths[method],
                markersize=2.5 + 1.3 * widths[method],
                **style,
            )
            handles.append(h)
            labels.append(method_label(method))
            if changes:
                draw_seeds(
                    axes[1, j],
                    changes,
                    average=True,
                    linewidth=0.6 * widths[method] + 0.4,
                    markersize=1.5 + widths[method],
                    **style,
                )
                rel_seen = True
        ax.set_title(f"failure = {level}")
        ax.grid(True, alpha=0.3)
        if j == 0:
            ax.set_ylabel("validation perplexity")
        if timeline:
            tl = axes[1, j]
            tl.grid(True, alpha=0.3)
            tl.set_xlabel("simulated time (s)")
            if j == 0:
                tl.set_ylabel("workers down")
        elif relative:
            rl = axes[1, j]
            rl.axhline(0, color="black", linewidth=0.6)
            rl.grid(True, alpha=0.3)
            rl.set_xlabel("optimizer step")
            if j == 0:
                rl.set_ylabel("ppl vs failure-free\nsame method (%)")
        else:
            ax.set_xlabel("optimizer step" if x == "step" else "simulated time (s)")
    if all_ppl and max(all_ppl) / max(min(all_ppl), 1e-9) > 3:
        axes[0, 0].set_yscale("log")
    if relative and not rel_seen:
        axes[1, 0].text(
            0.02,
            0.5,
            "no failure-free run to compare with",
            transform=axes[1, 0].transAxes,
            fontsize=8,
            color="0.4",
            va="center",
        )
    if timeline:
        axes[1, 0].set_ylim(-0.2, max_down + 0.5)
        axes[1, 0].yaxis.get_major_locator().set_params(integer=True)
    if group.groupby(["method", "failure"]).size().max() > 1:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        if x == "step":
            handles.append(Patch(color="0.5", alpha=0.25))
            labels.append(f"mean over seeds, band: {CONFIDENCE:.0%} CI")
        else:
            handles.append(Line2D([], [], color="0.5", alpha=0.5, linewidth=1.5))
            labels.append("fainter: other seeds")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    _legend_below(fig, handles, labels)
    return fig


def seed_band(curves: List[pd.Series]) -> pd.DataFrame:
    """mean, lo, hi (the Student-t 95% interval) and n over the seeds' curves at every x value
    any of them has (n counts the seeds there; no band where n < 2)."""
    from scipy import stats

    df = pd.concat([c[~c.index.duplicated(keep="last")] for c in curves], axis=1, join="outer").sort_index()
    n = df.notna().sum(axis=1)
    mean = df.mean(axis=1)
    t = pd.Series(stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1)), index=df.index)
    half = (t * df.std(axis=1, ddof=1) / np.sqrt(n)).where(n > 1)
    return pd.DataFrame({"mean": mean, "lo": mean - half, "hi": mean + half, "n": n})


def draw_seeds(ax, curves: List[pd.Series], average: bool, linewidth: float, markersize: float, **style):
    """One seed: its line. Several: the mean over seeds with a shaded 95% band (average=True),
    or one line per seed, the first strong and the others faint. Returns the legend handle."""
    if average and len(curves) > 1:
        band = seed_band(curves)
        (h,) = ax.plot(band.index, band["mean"], linewidth=linewidth, markersize=markersize, **style)
        ax.fill_between(band.index, band["lo"], band["hi"], color=style.get("color"), alpha=0.2, linewidth=0)
        return h
    handle = None
    for k, c in enumerate(curves):
        (h,) = ax.plot(
            c.index, c.to_numpy(), linewidth=linewidth, markersize=markersize, alpha=0.9 if k == 0 else 0.5, **style
        )
        handle = handle or h
    return handle


# ------------------------------------------------------------------------ throughput
def _yerr(half, scale: float = 1.0):
    """Error-bar lengths from ci95 half-widths (none for one seed)."""
    if half is None or not np.isfinite(half).any():
        return None
    return np.nan_to_num(half) * scale


def throughput_bars(group: pd.DataFrame, title: str = ""):
    """Left: tokens per simulated second per method, a bar per failure level. Right: the drop
    against failure-free, with the paper's drop at high (Table 2) as a marker."""
    table = throughput_table(group)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(max(12, 2.2 * len(table)), 5))
    if table.empty:
        plt.close(fig)
        return None
    levels = [c[len("thr_") :] for c in table.columns if c.startswith("thr_") and not c.endswith("_ci95")]
    faulty = [f for f in levels if f != "none"]
    methods = list(table["method"])
    err = {
        c: table[f"{c}_ci95"].to_numpy(dtype=float) if f"{c}_ci95" in table else None
        for c in [f"thr_{lv}" for lv in levels] + [f"drop_{lv}" for lv in faulty]
    }
    xs = np.arange(len(methods))
    width = 0.8 / max(1, len(levels))
    for i, level in enumerate(levels):
        vals = table[f"thr_{level}"].to_numpy(dtype=float)
        ax.bar(
            xs + (i - (len(levels) - 1) / 2) * width,
            vals,
            width,
            color=failure_color(level),
            edgecolor="black",
            linewidth=0.4,
            label=f"failure = {level}",
            yerr=_yerr(err[f"thr_{level}"]),
            error_kw={"elinewidth": 0.8, "capsize": 2},
        )
        for x0, v in zip(xs + (i - (len(levels) - 1) / 2) * width, vals):
            if not math.isfinite(v):
                ax.annotate(
                    "no run",
                    (x0, 0),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color="0.4",
                    rotation=90,
                    xytext=(0, 3),
                    textcoords="offset points",
                )
    ax.set_xticks(xs, [tick_label(m) for m in methods], fontsize=9)
    if np.nanmax(np.append(table[[f"thr_{lv}" for lv in levels]].to_numpy(dtype=float), 0)) >= 1e4:
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(thousands))
    ax.set_ylabel("throughput (committed tokens / simulated s)")
    ax.set_title("throughput")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=len(levels))

    width2 = 0.8 / max(1, len(faulty))
    drops_all = []
    for i, level in enumerate(faulty):
        vals = table[f"drop_{level}"].to_numpy(dtype=float) * 100
        drops_all.extend(v for v in vals if math.isfinite(v))
        pos = xs + (i - (len(faulty) - 1) / 2) * width2
        bars = ax2.bar(
            pos,
            vals,
            width2,
            color=failure_color(level),
            edgecolor="black",
            linewidth=0.4,
            label=f"failure = {level}",
            yerr=_yerr(err[f"drop_{level}"], 100),
            error_kw={"elinewidth": 0.8, "capsize": 2},
        )
        for b, v in zip(bars, vals):
            if math.isfinite(v):
                ax2.annotate(
                    f"{v:.1f}",
                    (b.get_x() + b.get_width() / 2, max(v, 0)),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    xytext=(0, 1),
                    textcoords="offset points",
                )
    paper_vals = table["paper_drop_high"].to_numpy(dtype=float) * 100
    if np.isfinite(paper_vals).any():
        ref = str(table["paper_ref"].iloc[0]).replace(" (", ", ").rstrip(")")
        at = xs + ((faulty.index("high") - (len(faulty) - 1) / 2) * width2 if "high" in faulty else 0)
        ax2.scatter(
            at, paper_vals, marker="D", s=36, color="black", zorder=5, label=f"paper Table 2 at high: LLaMA-{ref}"
        )
        drops_all.extend(v for v in paper_vals if math.isfinite(v))
    ax2.axhline(0, color="black", linewidth=0.6)
    ax2.set_xticks(xs, [tick_label(m) for m in methods], fontsize=9)
    ax2.set_ylabel("throughput drop vs failure-free (%)")
    # an interval needs two seeds: with one, no bar has one and the title claims none
    ax2.set_title(
        "drop = 1 - thr(level) / thr(none)"
        + (f", {CONFIDENCE:.0%} CI over seeds" if any(_yerr(v) is not None for v in err.values()) else "")
    )
    ax2.grid(True, axis="y", alpha=0.3)
    if drops_all:
        top = max(drops_all)
        ax2.set_ylim(min(0, min(drops_all)) * 1.15, max(top, 0) * 1.12 + 0.5)
    if faulty or np.isfinite(paper_vals).any():
        hs, ls = ax2.get_legend_handles_labels()
        order = sorted(range(len(ls)), key=lambda i: ls[i].startswith("paper"))  # the paper's marker last
        ax2.legend(
            [hs[i] for i in order],
            [ls[i] for i in order],
            fontsize=8,
            frameon=False,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.13),
            ncol=max(1, min(3, len(faulty))),
        )
    if not faulty:
        ax2.text(0.5, 0.5, "no runs under failures", transform=ax2.transAxes, ha="center", color="0.4")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------ time breakdown
def time_breakdown_bars(group: pd.DataFrame, title: str = ""):
    """Stacked simulated seconds per time_breakdown category, a panel per failure level."""
    from .tables import time_breakdown_table

    table = time_breakdown_table(group)
    if table.empty:
        return None
    cats = [c[len("share_") :] for c in table.columns if c.startswith("share_")]
    levels = failure_levels(table["failure"])
    methods = methods_present(table["method"])
    fig, axes = plt.subplots(
        1, len(levels), figsize=(max(3.2, 0.55 * len(methods) + 1.6) * len(levels), 4.2), squeeze=False, sharey=True
    )
    xs = np.arange(len(methods))
    for j, level in enumerate(levels):
        ax = axes[0, j]
        sub = table[table["failure"] == level].set_index("method").reindex(methods)
        bottom = np.zeros(len(methods))
        for c in cats:
            vals = np.nan_to_num(sub[f"time_{c}"].to_numpy(dtype=float))
            ax.bar(
                xs,
                vals,
                0.7,
                bottom=bottom,
                color=CATEGORY_COLORS.get(c, "tab:cyan"),
                edgecolor="white",
                linewidth=0.4,
                label=CATEGORY_LABELS.get(c, c),
            )
            bottom += vals
        ax.set_xticks(xs, [method_label(m) for m in methods], rotation=30, ha="right")
        ax.set_title(f"failure = {level}")
        ax.grid(True, axis="y", alpha=0.3)
        if j == 0:
            ax.set_ylabel("simulated time (s)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _legend_below(fig, handles, labels, ncol=3)
    return fig


# ------------------------------------------------------------------------ gradient error
def grad_error_curves(group: pd.DataFrame, title: str = ""):
    """MeCeFO's relative gradient error ||g_hat - g|| / ||g|| over training (the paper's Figs.
    4-7), per failure level: left, every seed as its own thin line (a marker per seed) and
    the mean over seeds as a thick one; right, the mean over seeds per parameter group with
    its 95% band. None when no run of the group has grad_error.jsonl."""
    group = ok_runs(group)
    mec = group[group["method"] == paper.METHOD]
    data = []
    for _, run in mec.iterrows():
        ge = load_grad_error(run["run_dir"])
        if not ge.empty and "rel_error" in ge:
            data.append((run["failure"], run["seed"], ge.set_index("step")))
    if not data:
        return None
    parts = [
        c
        for c in ("rel_error_attention", "rel_error_ffn", "rel_error_other")
        if any(c in ge and ge[c].notna().any() for _, _, ge in data)
    ]
    ncols = 2 if parts else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.6 * ncols, 3.9), squeeze=False, sharey=False)
    ax = axes[0, 0]
    levels = failure_levels([d[0] for d in data])
    seeds = sorted({d[1] for d in data}, key=str)
    seed_markers = dict(zip(seeds, "os^vD<>px*"))
    for level in levels:
        mine = [(seed, ge) for lv, seed, ge in data if lv == level]
        for seed, ge in mine:
            ax.plot(
                ge.index,
                ge["rel_error"],
                marker=seed_markers.get(seed, "o"),
                markersize=3,
                linewidth=0.7,
                alpha=0.55,
                color=failure_color(level),
            )
        if len(mine) > 1:
            band = seed_band([ge["rel_error"] for _, ge in mine])
            ax.plot(band.index, band["mean"], linewidth=2.2, color=failure_color(level))
    ax.axhline(paper.GRAD_ERROR_BOUND, color="black", linestyle="--", linewidth=1)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=failure_color(lv), linewidth=2, label=f"failure = {lv}") for lv in levels]
    if len(seeds) > 1:
        handles += [
            Line2D([], [], color="0.4", marker=seed_markers.get(sd, "o"), linewidth=0.7, alpha=0.7, label=f"seed {sd}")
            for sd in seeds
        ]
        handles.append(Line2D([], [], color="0.4", linewidth=2.2, label="mean over seeds"))
    handles.append(Line2D([], [], color="black", linestyle="--", label=f"paper: < {paper.GRAD_ERROR_BOUND} (LLaMA-1B)"))
    ax.legend(handles=handles, fontsize=7, frameon=False)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("relative gradient error ‖ĝ − g‖ / ‖g‖")
    ax.set_title("whole model")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if parts:
        ax2 = axes[0, 1]
        styles = {"rel_error_attention": "-", "rel_error_ffn": "--", "rel_error_other": ":"}
        for level in levels:
            for c in parts:
                curves = [ge[c].dropna() for lv, _, ge in data if lv == level and c in ge and ge[c].notna().any()]
                if curves:
                    draw_seeds(
                        ax2,
                        curves,
                        average=True,
                        linewidth=1.3,
                        markersize=3,
                        linestyle=styles[c],
                        marker=".",
                        color=failure_color(level),
                    )
        handles = [Line2D([], [], color="black", linestyle=styles[c], label=c.replace("rel_error_", "")) for c in parts]
        handles += [Line2D([], [], color=failure_color(lv), label=f"failure = {lv}") for lv in levels]
        ax2.axhline(paper.GRAD_ERROR_BOUND, color="black", linestyle="--", linewidth=1)
        ax2.legend(handles=handles, fontsize=7, frameon=False)
        ax2.set_xlabel("optimizer step")
        ax2.set_ylabel("relative gradient error per group")
        ax2.set_title("by parameter group" + (f" (mean over seeds, {CONFIDENCE:.0%} band)" if len(seeds) > 1 else ""))
        ax2.set_ylim(bottom=0)
        ax2.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------ all
def make_figures(runs: pd.DataFrame, out) -> List[Path]:
    """Every figure for every setting; returns the files written."""
    written: List[Path] = []
    for tag, group in settings(runs):
        title = setting_title(tag, group)
        figs = {
            f"ppl_vs_step_{tag}": ppl_curves(group, x="step", title=title),
            f"ppl_vs_time_{tag}": ppl_curves(group, x="sim_time_s", title=title),
            f"throughput_{tag}": throughput_bars(group, title=title),
            f"time_breakdown_{tag}": time_breakdown_bars(group, title=title),
            f"grad_error_{tag}": grad_error_curves(group, title=f"MeCeFO gradient error: {title}"),
        }
        note = not_shown(runs, group)
        for name, fig in figs.items():
            if fig is None:
                log.info("%s: nothing to draw (no data), skipped", name)
                continue
            if note and not name.startswith("grad_error"):
                fig.text(0.01, 0.0, note, fontsize=7, color="0.35", ha="left", va="top", wrap=True)
            written.extend(save(fig, out, name))
    return written
