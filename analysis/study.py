"""The shape every analysis entry shares: collect, then tables, then figures, then describe.

Each study (the default one in figures.py, paper_scale, convergence, oobleck_artifact) supplies
its four steps; `run_study` calls them in that order and returns the files written, by kind, so
that the sweep callback and the command lines report the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional


def run_study(
    out,
    collect: Callable[[], Any],
    tables: Callable[[Any, Path], Dict[str, List[Path]]],
    figures: Optional[Callable[[Any, Path], List[Path]]] = None,
    describe: Optional[Callable[[Any], str]] = None,
    draw: bool = True,
    verbose: bool = True,
    quiet_describe: Optional[Callable[[Any], None]] = None,
) -> Dict[str, List[Path]]:
    """`tables(data, out)` returns {kind: files}; `figures(data, out)` the figure files;
    `describe(data)` what is printed with verbose; `quiet_describe(data)` what is logged without."""
    out = Path(out)
    data = collect()
    written = {kind: list(files) for kind, files in tables(data, out).items()}
    written.setdefault("tables", [])
    written["figures"] = list(figures(data, out)) if draw and figures is not None else []
    if verbose and describe is not None:
        print(describe(data))
        print(
            f"wrote {sum(len(v) for v in written.values())} files under {out} ({len(written['figures'])} figure files)"
        )
    elif not verbose and quiet_describe is not None:
        quiet_describe(data)
    return written


def study_main(
    analyze: Callable[..., Dict[str, List[Path]]], doc: str, prog: str, argv: Optional[List[str]] = None
) -> int:
    """The command line of a study module: sweep folders, --out (default <first>/analysis), --no-figures."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path, help="sweep folders (or any folders holding run folders)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: <first folder>/analysis)")
    ap.add_argument("--no-figures", action="store_true", help="tables only")
    args = ap.parse_args(argv)
    analyze(args.roots, args.out or args.roots[0] / "analysis", figures=not args.no_figures, verbose=True)
    return 0
