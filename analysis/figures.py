"""Collect + tables + figures in one call.

    python -m analysis.figures runs/ [more dirs] --out analysis/out
    python -m analysis runs/ --out analysis/out            (the same)
    python -m analysis --label before=runs/sweeps/A --label after=runs/sweeps/B --out cmp
                                                           (two sweeps side by side)

Writes <out>/runs.{parquet,csv}, <out>/runs_all.{parquet,csv}, <out>/tables/*.{csv,md}
and <out>/figures/*.{png,pdf}; prints what it found, failed and unfinished runs included.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from .collect import collect, describe, parse_analysis_args, write_table

log = logging.getLogger(__name__)


def analyze(
    roots: Iterable, out, figures: bool = True, verbose: bool = True, labels: Optional[Dict[str, Sequence]] = None
) -> Dict[str, List[Path]]:
    """Collect every run under `roots` (and under each labelled folder) into `out`, then
    write the tables and the figures."""
    from .study import run_study
    from .tables import write_tables

    def figures_of(df, folder):
        from .plots import make_figures

        return make_figures(df, folder)

    roots = [Path(r) for r in roots]
    return run_study(
        out,
        lambda: collect(roots, labels=labels),
        lambda df, folder: {"table": write_table(df, folder).values(), "tables": write_tables(df, folder).values()},
        figures_of,
        describe,
        draw=figures,
        verbose=verbose,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, roots, labels = parse_analysis_args(
        "python -m analysis.figures",
        __doc__,
        "folders holding run folders (default: runs, unless --label is given)",
        argv,
        default_roots=["runs"],
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    analyze(roots, args.out, figures=not args.no_figures, labels=labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
