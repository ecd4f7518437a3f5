"""The clocks that price a step, one file each; a run's clock is chosen once, when it starts.

    data_parallel.py   synchronous data parallelism: the slowest worker's kernels, the exposed
                       all-reduce, the method's overhead (the default)
    hybrid_layout.py   a TP x PP x DP layout (parallel.tp or pp > 1): a slot doing more slows its
                       stage's pipeline slots (timing/layout.py has the 1F1B step)
    table.py           a failure-free throughput per node count (hardware.compute=table)

A method describes its step in the words of timing/steps.py; the clock says how long it takes.
A clock is a class with `of(costs, tables_key)`: itself for a run it prices, else None; `CLOCKS`
is the order they are asked in (the first that answers prices the run).
"""

from __future__ import annotations

from typing import Tuple, Type

from .data_parallel import DataParallelSteps
from .hybrid_layout import LayoutSteps
from .table import TableSteps

#: asked in this order: a throughput table overrides kernels; a hybrid layout overrides pure DP
CLOCKS: Tuple[Type[DataParallelSteps], ...] = (TableSteps, LayoutSteps, DataParallelSteps)


def clock_for(costs, tables_key: str) -> DataParallelSteps:
    """The clock of the run `costs` prices (`tables_key`: which of hardware.tables is its own)."""
    for kind in CLOCKS:
        clock = kind.of(costs, tables_key)
        if clock is not None:
            return clock
    raise AssertionError("the data-parallel clock prices every run")


__all__ = ["CLOCKS", "DataParallelSteps", "LayoutSteps", "TableSteps", "clock_for"]
