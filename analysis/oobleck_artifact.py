"""Our baselines against their authors' simulator: tables of the Oobleck artifact's scenarios.

    python -m analysis.oobleck_artifact <sweep dir> [--out DIR]

Reads the runs of `experiment=oobleck_artifact` (every run folder under the given roots whose
config names a scenario oobleck_artifact/<model>) and, per model, writes one table: for each
failure-frequency trace and system, our samples per second (the artifact's metric: credited
samples over the window from the first step to the last completed one), the same with the
artifact's behaviours switched on (`scenario.quirks=true`), the artifact's own number
(conf/scenario/oobleck_artifact/reference.csv), their ratio, and goodput over ideal; then the
ratios Oobleck/Varuna, Oobleck/Bamboo and Bamboo/Varuna, ours (without and with the artifact's
behaviours) beside the artifact's.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import pandas as pd

from mecefo_exp.bounded_read import read_text_bounded
from mecefo_exp.replay.differential import TABLE_ROWS

from .collect import MAX_RECORD_BYTES

log = logging.getLogger(__name__)

TRACES = ["6h", "3h", "1h", "30m", "10m"]
REFERENCE = Path(__file__).resolve().parent.parent / "conf" / "scenario" / "oobleck_artifact" / "reference.csv"
TOLERANCE = 0.02  # the agreement asked of our baselines, per cell


def reference(path: Path = REFERENCE) -> pd.DataFrame:
    if not path.exists():  # an installed wheel keeps conf/ inside the package
        from mecefo_exp.paths import conf_dir

        path = conf_dir() / "scenario" / "oobleck_artifact" / "reference.csv"
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    df = pd.DataFrame(rows)
    df["artifact"] = [None if s == "OOM" else float(v) for s, v in zip(df["status"], df["samples_per_s"])]
    return df[["model", "trace", "method", "artifact", "status"]]


def runs(roots: Iterable[Path]) -> pd.DataFrame:
    """One row per finished run of the artifact's scenarios."""
    from omegaconf import OmegaConf

    rows = []
    for root in roots:
        for summary_path in sorted(Path(root).rglob("summary.json")):
            folder = summary_path.parent
            config = folder / "config.yaml"
            if not config.exists():
                continue
            cfg = OmegaConf.load(config)
            name = str(OmegaConf.select(cfg, "scenario.name") or "")
            if not name.startswith("oobleck_artifact/"):
                continue
            try:
                summary = json.loads(read_text_bounded(summary_path, MAX_RECORD_BYTES))
            except (ValueError, OSError):
                log.warning("%s: unreadable summary.json, skipped", summary_path)
                continue
            if summary.get("status") != "ok":
                log.warning("%s: status %s, skipped", folder, summary.get("status"))
                continue
            window = summary.get("window") or {}
            rows.append(
                {
                    "model": name.split("/", 1)[1],
                    "trace": Path(str(cfg.failure.path)).stem,
                    "method": cfg.method.name,
                    "quirks": bool(OmegaConf.select(cfg, "scenario.quirks") or False),
                    "samples_per_s": window.get("samples_per_s") or 0.0,
                    "goodput_over_ideal": window.get("goodput_over_ideal"),
                    "credited_steps": summary.get("steps"),
                    "run_dir": str(folder),
                }
            )
    return pd.DataFrame(rows)


def model_table(ours: pd.DataFrame, ref: pd.DataFrame, model: str) -> pd.DataFrame:
    """Per trace x system: ours, ours with the artifact's behaviours, the artifact's, ratios."""
    out = []
    for trace in TRACES:
        for method, system in TABLE_ROWS.items():
            mine = ours[(ours.model == model) & (ours.trace == trace) & (ours.method == method)]
            theirs = ref[(ref.model == model) & (ref.trace == trace) & (ref.method == method)]
            if mine.empty and theirs.empty:
                continue
            plain = mine[~mine.quirks]
            quirky = mine[mine.quirks]
            art = theirs.artifact.iloc[0] if not theirs.empty else None
            oom = not theirs.empty and theirs.status.iloc[0] == "OOM"
            row = {
                "trace": trace,
                "system": system,
                "ours": plain.samples_per_s.iloc[0] if not plain.empty else None,
                "ours_artifact_behaviour": quirky.samples_per_s.iloc[0] if not quirky.empty else None,
                "artifact": "OOM" if oom else art,
                "goodput_over_ideal": plain.goodput_over_ideal.iloc[0] if not plain.empty else None,
            }
            for key in ("ours", "ours_artifact_behaviour"):
                row[f"ratio_{key}"] = (row[key] / art) if (row[key] is not None and art) else None
            best = [r for r in (row["ratio_ours"], row["ratio_ours_artifact_behaviour"]) if r is not None]
            row["within_2pct"] = (
                "OOM"
                if oom and plain.empty
                else ("yes" if best and min(abs(r - 1) for r in best) <= TOLERANCE else ("no" if best else ""))
            )
            out.append(row)
    return pd.DataFrame(out)


def system_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Oobleck/Varuna, Oobleck/Bamboo, Bamboo/Varuna per trace, ours and the artifact's."""
    out = []
    for trace in TRACES:
        at = table[table.trace == trace].set_index("system")

        def val(system: str, col: str) -> Optional[float]:
            if system not in at.index:  # noqa: B023 (called in this iteration)
                return None
            v = at.loc[system, col]  # noqa: B023
            return float(v) if isinstance(v, (int, float)) and v == v else None

        row = {"trace": trace}
        for a, b in (("Oobleck", "Varuna"), ("Oobleck", "Bamboo"), ("Bamboo", "Varuna")):
            for col, label in (("ours", "ours"), ("ours_artifact_behaviour", "ours+quirks"), ("artifact", "artifact")):
                x, y = val(a, col), val(b, col)
                row[f"{a}/{b} {label}"] = (x / y if y else float("inf")) if x is not None and y is not None else None
        out.append(row)
    return pd.DataFrame(out)


def _fmt(df: pd.DataFrame) -> str:
    def cell(v):
        if v is None or (isinstance(v, float) and v != v):
            return ""
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def analyze(roots: List[Path], out: Path, figures: bool = True, verbose: bool = False) -> Dict[str, List[Path]]:
    from .study import run_study

    def collect_runs():
        ours = runs(roots)
        if ours.empty:
            raise SystemExit(f"no run of the oobleck_artifact scenarios under {', '.join(map(str, roots))}")
        ref = reference()
        return ours, {model: model_table(ours, ref, model) for model in sorted(ours.model.unique())}

    def describe(data) -> str:
        text = []
        for model, table in data[1].items():
            graded = table[table.within_2pct.isin(["yes", "no"])]
            text += [
                f"## {model}",
                "",
                _fmt(table),
                "",
                _fmt(system_ratios(table)),
                "",
                f"{(graded.within_2pct == 'yes').sum()}/{len(graded)} graded cells within 2% (either setting)",
                "",
            ]
        return "\n".join(text)

    def write(data, out):
        out.mkdir(parents=True, exist_ok=True)
        ours, tables = data
        files = [out / "oobleck_artifact_runs.csv", out / "oobleck_artifact.md"]
        ours.to_csv(files[0], index=False)
        files[1].write_text(describe(data))
        for model, table in tables.items():
            files += [out / f"oobleck_artifact_{model}.csv", out / f"oobleck_artifact_{model}_ratios.csv"]
            table.to_csv(files[-2], index=False)
            system_ratios(table).to_csv(files[-1], index=False)
        return {"tables": files}

    def draw(data, out):
        return [_figure(table, model, out / f"oobleck_artifact_{model}.png") for model, table in data[1].items()]

    return run_study(out, collect_runs, write, draw, describe, draw=figures, verbose=verbose)


def _figure(table: pd.DataFrame, model: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, (system, rows) in enumerate(table.groupby("system", sort=False)):
        x = [TRACES.index(t) for t in rows.trace]
        ax.plot(
            x, [v if v is not None else float("nan") for v in rows.ours], "o-", color=f"C{i}", label=f"{system} (ours)"
        )
        art = [v if isinstance(v, float) else float("nan") for v in rows.artifact]
        ax.plot(x, art, "x--", color=f"C{i}", label=f"{system} (artifact)")
    ax.set_xticks(range(len(TRACES)), [f"every {t}" for t in TRACES])
    ax.set_ylabel("samples / s")
    ax.set_title(f"{model}: throughput against failure frequency")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    from .study import study_main

    return study_main(analyze, __doc__, "python -m analysis.oobleck_artifact", argv)


if __name__ == "__main__":
    raise SystemExit(main())
