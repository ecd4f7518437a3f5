"""The Oobleck authors' simulators' clock, a failure-free throughput per node count
(`hardware.clock`, conf/hardware/table.yaml): a step on n nodes takes samples_per_step / table[n]
seconds, a helper slows the whole step by its factor, and the table's step is the whole step
(throughput.py). Its summary is their metric over the run's window (window_metric.py)."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from ..config import is_hybrid
from ..timing.clocks import DataParallelSteps
from ..timing.steps import Help, RedundantForward, StepCost, minus
from .throughput import ThroughputTable, table_for
from .window_metric import check_goodput, window_summary


class TableSteps(DataParallelSteps):
    """The table's step at a node count is the whole step: overheads and redundancy are in it."""

    #: the kernels (from FLOPs) still time checkpoints and copies; a step's seconds are the table's
    INFO = {"compute": "table", "efficiency_source": "hardware.tables (throughput per node count)"}
    kernels_bound_memory = False  # the table says itself where a system does not fit (an entry of 0)

    def __init__(self, costs, table: ThroughputTable):
        super().__init__(costs)
        self.table = table
        self._steps: Dict[tuple, StepCost] = {}

    @classmethod
    def of(cls, costs, tables_key: str) -> Optional["TableSteps"]:
        hw = costs.hw
        table = table_for(hw.tables, tables_key, hw.samples_per_step, hw.step_ms_integer)
        return cls(costs, table) if table is not None else None

    @classmethod
    def check_config(cls, cfg) -> Optional[str]:
        """The tables' shape, a table for the method, and the method fitting at the starting node count."""
        h = cfg.hardware
        if h.samples_per_step < 1:
            return f"hardware.samples_per_step={h.samples_per_step}: must be >= 1 with the throughput-table clock"
        if not h.tables:
            return (
                "hardware.tables is empty: the throughput-table clock needs {method or default: {nodes: samples_per_s}}"
            )
        for method, table in h.tables.items():
            if not table:
                return f"hardware.tables.{method} is empty"
            for nodes, tput in table.items():
                if not (str(nodes).isdigit() and isinstance(tput, (int, float)) and math.isfinite(tput) and tput >= 0):
                    return f"hardware.tables.{method}: {nodes}: {tput!r}: expected a node count and samples/s >= 0"
        if is_hybrid(cfg):
            return (
                f"parallel.tp={cfg.parallel.tp}, pp={cfg.parallel.pp} with the throughput-table clock: a table's "
                "step is the whole step of every layout; use parallel.tp=1 parallel.pp=1"
            )
        table = table_for(h.tables, cfg.method.name, h.samples_per_step)
        if table is None:
            return (
                f"hardware.tables has no table for method={cfg.method.name} and no default; "
                f"tables: {', '.join(h.tables)}"
            )
        if not table.fits(cfg.cluster.n_workers):
            return (
                f"method={cfg.method.name} cannot run here: {table.label} is 0 (out of memory) at "
                f"{cfg.cluster.n_workers} nodes"
            )
        return None

    def summary(self, span, trace, steps: int, n_workers: int) -> Dict[str, Any]:
        return {"window": window_summary(span, trace, self.table, steps, n_workers)}

    def check_summary(self, summary: Dict[str, Any]) -> None:
        check_goodput(summary.get("window"))  # credited work never exceeds the ideal

    def table_step(self, nodes: int, slowdown: float = 1.0, ft_overhead: float = 0.0) -> StepCost:
        """A step on `nodes` nodes; what `slowdown` adds is `degraded_extra`."""
        key = (nodes, slowdown, ft_overhead)
        if key not in self._steps:
            normal = self.table.step_s(nodes)
            self._steps[key] = StepCost(
                compute=normal, ft_overhead=ft_overhead, degraded_extra=self.table.step_s(nodes, slowdown) - normal
            )
        return self._steps[key]

    def failure_free(self, n: int) -> StepCost:
        return self.table_step(n)

    def workers(self, special, first_normal, n_computing, ft_overhead) -> StepCost:
        return self.table_step(n_computing, ft_overhead=ft_overhead)

    def spread(self, n: int, n_computing: int) -> StepCost:
        return self.table_step(n_computing)

    def redundant_s(self, redundant: RedundantForward) -> float:
        return 0.0

    def rest(self, full: StepCost, done_s: float, slowed_in_flight: Optional[Help]) -> StepCost:
        """A step begun at the failure-free speed and slowed in flight (`slowed_in_flight`): what
        was done ran at the speed it started at, the rest runs slowed. A step begun slowed keeps
        its cost, less what was done."""
        if slowed_in_flight is None:
            return minus(full, done_s)
        slowdown = slowed_in_flight.slowdown if slowed_in_flight.slowdown is not None else 2.0
        left = max(0.0, full.compute - done_s)  # a table step's compute is the failure-free step
        return StepCost(compute=left, degraded_extra=(slowdown - 1.0) * left)

    def helped(self, plan, helpers, slots, model_work_s, redundant) -> StepCost:
        """The step at the job's `slots` nodes, slowed by the largest helper's factor (a shadow doing
        its ward's work too: two micro-batches' time)."""
        profile = self.costs.profile
        slowdown = max(
            (
                profile[h.kernel] / profile["mb:normal"]
                if h.kernel is not None
                else h.slowdown
                if h.slowdown is not None
                else 2.0
                for h in helpers
            ),
            default=1.0,
        )
        return self.table_step(slots, slowdown=slowdown)
