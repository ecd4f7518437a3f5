"""The paper-scale study's figures: MeCeFO's drop at high against the outage length and against the
inter-node bandwidth (analysis/paper_scale.py has the study, its runs and its tables)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

import pandas as pd

from . import paper
from .formats import fmt_tok, thousands
from .paper_scale import (
    DEFAULT_READING,
    PAPER_GBPS,
    PROCESS_ORDER,
    at_paper_bandwidth,
    fmt_g,
    model_rank,
    seed_means,
)


def _plt():
    import matplotlib

    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _tok_formatter():
    import matplotlib.ticker

    return matplotlib.ticker.FuncFormatter(thousands)


def _na(ax, what: str = "n/a") -> None:
    ax.text(
        0.5,
        0.6,
        what,
        transform=ax.transAxes,
        ha="center",
        va="center",
        color="0.4",
        fontsize=12,
        bbox={"facecolor": "white", "edgecolor": "0.7"},
    )
    ax.set_xticks([])


def _paper_line(ax, model: str, method: str = paper.METHOD) -> None:
    ref = paper.throughput(model, method)["drop_high"]
    if ref is not None:
        ax.axhline(
            ref * 100,
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"paper Table 2 ({paper.ref_label(model)}): {ref * 100:.2f}%",
        )


def _duration(s: float) -> str:
    return f"{s / 3600:g} h" if s >= 3600 else (f"{s / 60:g} min" if s >= 120 else f"{s:g} s")


def _not_shown(runs: pd.DataFrame, model: str) -> str:
    kept = runs[runs["selected"] & (runs["model"] == model) & (runs["method"] == paper.METHOD)]
    bad = kept[kept["status"] != "ok"]
    if bad.empty:
        return ""
    return "not shown, did not finish: " + "; ".join(
        f"{r['failure']} {r['reading']} {fmt_g(r['inter_node_GBps']) or '?'} GB/s ({r['status']})"
        for _, r in bad.iterrows()
    )


def outage_figure(drops: pd.DataFrame, runs: pd.DataFrame, model: str):
    """MeCeFO's drop at high against how long a failed unit stays down (repair=replace after
    replace_s; fixed = the preset's recover_h), a line per process/unit combination."""
    plt = _plt()
    d = at_paper_bandwidth(
        drops[
            (drops["model"] == model)
            & (drops["method"] == paper.METHOD)
            & (drops["failure"] == "high")
            & drops["repair"].isin(["replace", "fixed"])
        ]
    )
    d = d[d["outage_s"].notna() & d["drop"].notna()]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    combos = d[["process", "unit_gpus"]].drop_duplicates()
    combos = combos.assign(_p=combos["process"].map(lambda p: PROCESS_ORDER.index(p) if p in PROCESS_ORDER else 9))
    for i, (_, c) in enumerate(combos.sort_values(["_p", "unit_gpus"]).iterrows()):
        line = d[(d["process"] == c["process"]) & (d["unit_gpus"] == c["unit_gpus"])].sort_values("outage_s")
        color = f"C{i}"
        ax.plot(
            line["outage_s"],
            line["drop"] * 100,
            color=color,
            linewidth=1.2,
            label=f"{c['process']}, {int(c['unit_gpus'])} GPU{'s' if c['unit_gpus'] > 1 else ''}",
        )
        for repair, marker in (("replace", "o"), ("fixed", "s")):
            pts = line[line["repair"] == repair]
            ax.scatter(pts["outage_s"], pts["drop"] * 100, color=color, marker=marker, s=28, zorder=3)
    if d.empty:
        _na(ax)
    else:
        ax.set_xscale("log")
        ticks = sorted(d["outage_s"].unique())
        ax.set_xticks(
            ticks,
            [_duration(t) + (" (fixed)" if any(d.loc[d["outage_s"] == t, "repair"] == "fixed") else "") for t in ticks],
            rotation=30,
            fontsize=8,
        )
        ax.minorticks_off()
    _paper_line(ax, model)
    ax.set_xlabel("outage per failure (replace after s; fixed = recover_h)")
    ax.set_ylabel("MeCeFO throughput drop at high (%)")
    ax.set_title(f"{model}: MeCeFO's drop vs outage length ({PAPER_GBPS:g} GB/s)", fontsize=10)
    return _finish(fig, [ax], runs, model)


def _finish(fig, axes, runs: pd.DataFrame, model: str):
    """Grid and legend on every panel, the runs not shown as a footnote, tight layout."""
    for a in axes:
        a.grid(True, alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8, frameon=False)
    _footnote(fig, _not_shown(runs, model))
    fig.tight_layout()
    return fig


def bandwidth_figure(drops: pd.DataFrame, means: pd.DataFrame, runs: pd.DataFrame, model: str):
    """Left: MeCeFO's drop at high (default reading) against the inter-node bandwidth. Right: its
    failure-free tokens/s, since the calibration holds only at the paper's 25 GB/s."""
    plt = _plt()
    d = drops[
        (drops["model"] == model)
        & (drops["method"] == paper.METHOD)
        & (drops["failure"] == "high")
        & (drops["reading"] == DEFAULT_READING)
        & drops["drop"].notna()
    ].sort_values("inter_node_GBps")
    n = means[
        (means["model"] == model)
        & (means["method"] == paper.METHOD)
        & (means["failure"] == "none")
        & means["inter_node_GBps"].notna()
    ].sort_values("inter_node_GBps")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    if d.empty:
        _na(ax)
    else:
        ax.plot(d["inter_node_GBps"], d["drop"] * 100, color="tab:red", marker="o", label="MeCeFO (harness)")
        ax.set_xscale("log", base=2)
    _paper_line(ax, model)
    ax.set_ylabel(f"throughput drop at high, {DEFAULT_READING} (%)")
    ax.set_title(f"{model}: MeCeFO's drop vs inter-node bandwidth", fontsize=10)
    if n.empty:
        _na(ax2)
    else:
        ax2.plot(n["inter_node_GBps"], n["throughput_tok_s"], color="tab:red", marker="o", label="MeCeFO (harness)")
        ax2.set_xscale("log", base=2)
        ax2.yaxis.set_major_formatter(_tok_formatter())
        ref = paper.throughput(model, paper.METHOD)["none"]
        if ref is not None:
            ax2.axhline(ref, color="black", linestyle="--", linewidth=1, label=f"paper Table 2: {fmt_tok(ref)}")
    ax2.set_ylabel("failure-free tokens / simulated s")
    ax2.set_title(f"{model}: MeCeFO failure-free throughput", fontsize=10)
    for a, data in ((ax, d), (ax2, n)):
        if not data.empty:
            ticks = sorted(set(data["inter_node_GBps"]) | {PAPER_GBPS})
            a.set_xticks(ticks, [f"{t:g}" for t in ticks])
            a.minorticks_off()
            a.axvline(PAPER_GBPS, color="0.5", linestyle=":", linewidth=1, label=f"paper: {PAPER_GBPS:g} GB/s")
        a.set_xlabel("inter-node bandwidth per machine (GB/s)")
    return _finish(fig, [ax, ax2], runs, model)


def _footnote(fig, text: str) -> None:
    if text:
        fig.text(0.01, -0.02, text, fontsize=7, color="0.3", ha="left", va="top", wrap=True)


def make_figures(runs: pd.DataFrame, drops: pd.DataFrame, out) -> List[Path]:
    """Both figures for every model that has a kept run (a panel without data says n/a)."""
    from .plots import save

    if runs.empty:
        return []
    means = seed_means(runs)
    kept = runs[runs["selected"]] if "selected" in runs else runs
    models = sorted({m for m in kept["model"] if isinstance(m, str)}, key=lambda m: (model_rank(m), m))
    paths: List[Path] = []
    for model in models:
        paths += save(outage_figure(drops, runs, model), out, f"mecefo_drop_vs_outage_{model}")
        paths += save(bandwidth_figure(drops, means, runs, model), out, f"mecefo_drop_vs_bandwidth_{model}")
    return paths
