"""A failure-free throughput per node count (hardware.compute=table, the clock of the Oobleck
artifact's scenarios): a step on n nodes takes samples_per_step / table[n] seconds, a helper slows
the whole step by its factor, and the table's step is the whole step (throughput.py)."""

from __future__ import annotations

from typing import Dict, Optional

from ...throughput import ThroughputTable, table_for
from ..steps import Help, RedundantForward, StepCost, minus
from .data_parallel import DataParallelSteps


class TableSteps(DataParallelSteps):
    """The table's step at a node count is the whole step: overheads and redundancy are in it."""

    def __init__(self, costs, table: ThroughputTable):
        super().__init__(costs)
        self.table = table
        self._steps: Dict[tuple, StepCost] = {}

    @classmethod
    def of(cls, costs, tables_key: str) -> Optional["TableSteps"]:
        hw = costs.hw
        if hw.get("compute") != "table":
            return None
        table = table_for(hw.tables, tables_key, hw.samples_per_step, hw.step_ms_integer)
        return cls(costs, table) if table is not None else None

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
