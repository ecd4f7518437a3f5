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


def analyze(roots: Iterable, out, figures: bool = True, verbose: bool = True,
            labels: Optional[Dict[str, Sequence]] = None) -> Dict[str, List[Path]]:
    """Collect every run under `roots` (and under each labelled folder) into `out`, then
    write the tables and the figures."""
    from .tables import write_tables

    out = Path(out)
    roots = [Path(r) for r in roots]
    df = collect(roots, labels=labels)
    written = {"table": list(write_table(df, out).values()), "tables": list(write_tables(df, out).values()),
               "figures": []}
    if figures:
        from .plots import make_figures

        written["figures"] = make_figures(df, out)
    if verbose:
        print(describe(df))
        n = sum(len(v) for v in written.values())
        print(f"wrote {n} files under {out} ({len(written['figures'])} figure files)")
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, roots, labels = parse_analysis_args("python -m analysis.figures", __doc__,
                                              "folders holding run folders (default: runs, unless --label is given)",
                                              argv, default_roots=["runs"])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    analyze(roots, args.out, figures=not args.no_figures, labels=labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
