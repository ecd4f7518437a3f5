"""The clocks that price a step, one file each; a run's clock is chosen once, when it starts.

    data_parallel.py   synchronous data parallelism: the slowest worker's kernels, the exposed
                       all-reduce, the method's overhead (the default)
    hybrid_layout.py   a TP x PP x DP layout (parallel.tp or pp > 1): a slot doing more slows its
                       stage's pipeline slots (timing/layout.py has the 1F1B step)

A study may bring its own clock and name it as `hardware.clock: package.module:Class` (as
`method.variant` names a method's): a subclass of `DataParallelSteps` that then prices every step,
with its own checks (`check_config`) and summary (`summary`, `check_summary`). The Oobleck
artifact's throughput table is one (mecefo_exp/replay/table_clock.py, conf/hardware/table.yaml).

A method describes its step in the words of timing/steps.py; the clock says how long it takes.
A clock is a class with `of(costs, tables_key)`: itself for a run it prices, else None; `CLOCKS`
is the order they are asked in where the config names none (the first that answers prices the run).
"""

from __future__ import annotations

from typing import Optional, Tuple, Type

from ...registry import named_class
from .data_parallel import DataParallelSteps
from .hybrid_layout import LayoutSteps

#: asked in this order: a hybrid layout overrides pure DP
CLOCKS: Tuple[Type[DataParallelSteps], ...] = (LayoutSteps, DataParallelSteps)


def clock_class(path: str) -> Type[DataParallelSteps]:
    """`hardware.clock`'s class; ValueError, ImportError or TypeError where it names none."""
    cls = named_class(path)
    if not (isinstance(cls, type) and issubclass(cls, DataParallelSteps)):
        raise TypeError(f"{path} is not a clock: a subclass of {DataParallelSteps.__module__}.DataParallelSteps")
    return cls


def named_clock(hardware_cfg) -> Optional[Type[DataParallelSteps]]:
    """The clock the config names (`hardware.clock`), or None."""
    path = hardware_cfg.get("clock")
    return clock_class(path) if path else None


def check_clock(cfg) -> None:
    """hardware.clock: an importable clock, and what that clock checks of the config; ConfigError in
    one line otherwise. Called with the other checks, before any compute (api.validate_run)."""
    from ...errors import ConfigError

    path = cfg.hardware.get("clock")
    if not path:
        return
    try:
        cls = clock_class(path)
    except TypeError as e:  # imported, but not a clock
        raise ConfigError(f"hardware.clock: {e}") from None
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"hardware.clock={path!r}: cannot be imported as package.module:Class ({e})") from None
    problem = cls.check_config(cfg)
    if problem is not None:
        raise ConfigError(problem)


def clock_for(costs, tables_key: str) -> DataParallelSteps:
    """The clock of the run `costs` prices (`tables_key`: the method, which a clock may key its data by)."""
    named = named_clock(costs.hw)
    if named is not None:
        clock = named.of(costs, tables_key)
        if clock is None:
            raise ValueError(f"hardware.clock={costs.hw['clock']} does not price this run")
        return clock
    for kind in CLOCKS:
        clock = kind.of(costs, tables_key)
        if clock is not None:
            return clock
    raise AssertionError("the data-parallel clock prices every run")


__all__ = ["CLOCKS", "DataParallelSteps", "LayoutSteps", "check_clock", "clock_class", "clock_for", "named_clock"]
