"""Tables and figure helpers in the formats papers use: LaTeX (booktabs, through pandas'
Styler.to_latex), CSV and Markdown side by side; a paper-hours axis; "n/a" for empty panels.

Kept apart from tables.py and plots.py so that they can change independently. tables.write_tables
writes every table's .tex from the same display cells as its .md. Still to hook in:
    plots.ppl_curves (x="sim_time_s"):  paper_hours_axis(ax, seconds_per_paper_hour(run))
    any panel with no data:  na_panel(ax)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Dict, Mapping, Optional, Sequence

import pandas as pd

NA = "n/a"
FORMATS = ("md", "tex", "csv")


#: characters LaTeX reads as commands, and what to write instead
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """`text` with LaTeX's special characters escaped (for captions; cells go through pandas)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(
    df: pd.DataFrame,
    columns: Optional[Mapping[str, str]] = None,
    caption: Optional[str] = None,
    label: Optional[str] = None,
    precision: int = 2,
    na: str = NA,
    escape_caption: bool = False,
    column_format: Optional[str] = None,
) -> str:
    """A booktabs table (\\toprule ... \\bottomrule) of `df`.

    `columns` picks and renames columns ({column: header}, in order); text is escaped for
    LaTeX (method names, underscores, %), missing values print as `na`, "±" as $\\pm$ (the
    "mean ± 95% CI half-width" cells of analysis/tables.py). `column_format`: e.g. "llrr"
    (default: every column left-aligned).
    """
    if columns is not None:
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise KeyError(f"to_latex: columns {missing} not in the table; it has {list(df.columns)}")
        df = df[list(columns)].rename(columns=dict(columns))
    styler = df.style.hide(axis="index").format(precision=precision, na_rep=na, escape="latex")
    styler = styler.format_index(escape="latex", axis="columns")
    if caption is not None and escape_caption:
        caption = latex_escape(caption)
    tex = styler.to_latex(
        hrules=True,
        caption=caption,
        label=label,
        column_format=column_format,
        position_float="centering" if caption else None,
    )
    return tex.replace("±", r"$\pm$")


def to_markdown(df: pd.DataFrame, na: str = NA, precision: int = 2) -> str:
    """A plain pipe table (no tabulate needed), missing values as `na`."""

    def cell(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return na
        return f"{v:.{precision}f}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def write_formats(
    df: pd.DataFrame,
    folder,
    name: str,
    title: str,
    markdown: Optional[str] = None,
    formats: Sequence[str] = FORMATS,
    columns: Optional[Mapping[str, str]] = None,
) -> Dict[str, Path]:
    """<folder>/<name>.{md,tex,csv}; `markdown`: a table already rendered (tables.py's own)."""
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"formats {bad}: allowed: {', '.join(FORMATS)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths: Dict[str, Path] = {}
    if "csv" in formats:
        paths[f"{name}.csv"] = folder / f"{name}.csv"
        df.to_csv(paths[f"{name}.csv"], index=False)
    if "md" in formats:
        paths[f"{name}.md"] = folder / f"{name}.md"
        paths[f"{name}.md"].write_text(f"# {title}\n\n{markdown if markdown is not None else to_markdown(df)}\n")
    if "tex" in formats:
        paths[f"{name}.tex"] = folder / f"{name}.tex"
        paths[f"{name}.tex"].write_text(to_latex(df, columns, caption=title, label=f"tab:{name}"))
    return paths


def seconds_per_paper_hour(summary: Mapping, paper_run_h: float = 12.4) -> Optional[float]:
    """Simulated seconds per paper hour of a run (None where no map applies).

    A miniature clock (hardware.paper_time=scaled) maps one paper hour to the run's
    failure-free duration / cluster.paper_run_h (docs/CLOCK.md); a cluster clock
    (paper_time=real) is in real seconds, 3600 per hour.
    """
    clock = summary.get("clock") or {}
    if clock.get("paper_time") == "real":
        return 3600.0
    step, steps = clock.get("failure_free_step_s"), summary.get("max_steps")
    if not step or not steps:
        return None
    return step * steps / paper_run_h


def paper_hours_axis(ax, seconds_per_hour: Optional[float], label: str = "paper hours"):
    """A second x axis on top, in paper hours, for a panel whose x is simulated seconds."""
    if not seconds_per_hour:
        return None
    sec = ax.secondary_xaxis("top", functions=(lambda s: s / seconds_per_hour, lambda h: h * seconds_per_hour))
    sec.set_xlabel(label)
    return sec


def na_panel(ax, text: str = NA) -> None:
    """An empty panel says so instead of staying blank."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=12, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


# ------------------------------------------------------------------ numbers in tables and on axes
def fmt_tok(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v / 1e3:.1f}k" if abs(v) >= 1e3 else f"{v:.0f}"


def fmt_pct(v, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v * 100:+.2f}%" if signed else f"{v * 100:.2f}%"


def fmt_num(digits: int) -> Callable:
    def f(v) -> str:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return ""
        return f"{v:.{digits}f}"

    return f


def fmt_g3(v) -> str:
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3g}"


def fmt_ratio(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v:.2f}x"


def ci_text(value, half, fmt: Callable) -> str:
    text = fmt(value)
    if text and half is not None and isinstance(half, float) and math.isfinite(half):
        return f"{text} ± {fmt(half).lstrip('+')}"
    return text


def fmt_int(v) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return ""
    return "" if not math.isfinite(f) else str(int(f))


def thousands(v, _pos=None) -> str:
    return f"{v / 1e3:g}k" if abs(v) >= 1e3 else f"{v:g}"
