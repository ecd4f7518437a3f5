"""Frontier scale: every method on Llama 3 405B's cluster, at Llama 3's interruption rate and
at multiples of it (conf/experiment/llama3_405b.yaml).

    python -m analysis.frontier runs/sweeps/<sweep> [more dirs] --out <dir> [--no-figures]

Per run (numerics off, 16,384 GPUs, TP8 x PP16 x DP128, one 8-GPU server per failure):
effective training time = the failure-free time of the steps done (steps x the layout's
failure-free step) over the elapsed simulated time, as Llama 3 reports it ("higher than 90%
effective training time"); the throughput drop is 1 minus it. Also the checkpoint interval
the rollback methods chose (Young/Daly, docs/DESIGN.md), the interruptions (servers lost) and
the memory per GPU of the layout.

Written under <out>: tables/frontier_runs.csv (every column, every run), tables/frontier.md (the
table RESULTS.md publishes) and figures/frontier_effective_time.png (effective training time
against the interruption rate, one line per method, at the 600 s replacement). Runs that are not
ok are listed, never dropped silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pandas as pd

from .collect import dig, find_run_dirs, run_config

LLAMA3_EVERY_H = 54 * 24 / 419  # one unexpected interruption every 3.09 h cluster-wide (docs/METHODS.md)


def runs(roots: List[Path]) -> pd.DataFrame:
    rows = []
    for run_dir in find_run_dirs(roots):
        cfg = run_config(run_dir)
        path = run_dir / "summary.json"
        if cfg is None or dig(cfg, ["experiment"]) != "llama3_405b" or not path.exists():
            continue
        s = json.loads(path.read_text())
        step_s = s.get("clock", {}).get("failure_free_step_s")
        ok = s.get("status") == "ok" and step_s
        effective = s["steps"] * step_s / s["sim_time_s"] if ok else None
        mem = s.get("memory", {})
        rows.append(
            {
                "method": s.get("method"),
                "rate_x": round(LLAMA3_EVERY_H / dig(cfg, ["failure", "every_h"]), 3),
                "replace_s": dig(cfg, ["failure", "replace_s"]),
                "status": s.get("status"),
                "days": s["sim_time_s"] / 86400 if ok else None,
                "steps": s.get("steps"),
                "interruptions": (s.get("failures") or 0) // max(1, dig(cfg, ["failure", "unit_gpus"]) or 1),
                "rollbacks": s.get("rollbacks"),
                "effective_time": effective,
                "drop": None if effective is None else 1 - effective,
                # a rollback method's Young/Daly interval; an in-place method that never writes one: none;
                # REFT: its in-memory snapshot interval (its disk checkpoint is only the first)
                "checkpoint_interval": (
                    f"{s['snapshot_every']} (memory)"
                    if s.get("snapshot_every")
                    else s["checkpoint_interval"]
                    if s.get("checkpoint_interval") and s["checkpoint_interval"] < (s.get("steps") or 0)
                    else "none"
                ),
                "peak_GB_per_gpu": (mem.get("peak_GB") or {}).get("normal"),
                "fits_80GB": (mem.get("fits") or {}).get("normal"),
                "mfu_failure_free": s.get("clock", {}).get("implied_mfu"),
                "run_dir": str(run_dir),
            }
        )
    return pd.DataFrame(rows)


#: the columns of the published table (the csv has every column)
SHOWN = [
    "method",
    "rate_x",
    "replace_s",
    "days",
    "interruptions",
    "rollbacks",
    "effective_time",
    "drop",
    "checkpoint_interval",
]


def _fmt(df: pd.DataFrame) -> str:
    def cell(col, v):
        if v is None or (isinstance(v, float) and v != v):
            return ""
        if col in ("effective_time", "drop", "mfu_failure_free"):
            return f"{100 * v:.2f}%"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cols = SHOWN
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(c, getattr(r, c)) for c in cols) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def analyze(roots: List[Path], out: Path, figures: bool = True, verbose: bool = False) -> Dict[str, List[Path]]:
    from .study import run_study

    def collect_runs():
        df = runs(roots)
        if df.empty:
            raise SystemExit(f"no run of experiment=llama3_405b under {', '.join(map(str, roots))}")
        return df.sort_values(["replace_s", "rate_x", "method"]).reset_index(drop=True)

    def describe(df) -> str:
        bad = df[df.status != "ok"]
        text = ["## Effective training time on Llama 3 405B's cluster", "", _fmt(df[df.status == "ok"]), ""]
        if not bad.empty:
            text += [f"{len(bad)} runs not ok: " + ", ".join(bad.run_dir), ""]
        return "\n".join(text)

    def write(df, out):
        (out / "tables").mkdir(parents=True, exist_ok=True)
        files = [out / "tables" / "frontier_runs.csv", out / "tables" / "frontier.md"]
        df.to_csv(files[0], index=False)
        files[1].write_text(describe(df))
        return {"tables": files}

    def draw(df, out):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        at = df[(df.replace_s == 600) & (df.status == "ok")]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for method, rows in at.groupby("method"):
            rows = rows.sort_values("rate_x")
            ax.plot(rows.rate_x, 100 * rows.effective_time, "o-", label=method)
        ax.axhline(90, color="grey", ls=":", lw=1, label="Llama 3: > 90%")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("interruption rate (x Llama 3's: one every 3.09 h)")
        ax.set_ylabel("effective training time (%)")
        ax.set_title("Llama 3 405B, 16,384 H100 (simulated, calibrated clock)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        (out / "figures").mkdir(parents=True, exist_ok=True)
        path = out / "figures" / "frontier_effective_time.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return [path]

    return run_study(out, collect_runs, write, draw, describe, draw=figures, verbose=verbose)


def main(argv=None) -> int:
    from .study import study_main

    return study_main(analyze, __doc__, "python -m analysis.frontier", argv)


if __name__ == "__main__":
    raise SystemExit(main())
