"""A failure-free throughput table: samples per second for each number of usable nodes.

The Oobleck authors' simulators time a step from such a table, one per system and model
(docs/METHODS.md). A step of `samples_per_step` samples on n nodes takes
samples_per_step / table[n] seconds; n outside the table's range uses the nearest entry; an
entry of 0 means the system cannot run there (out of memory): a step there takes
`STALLED_STEP_S`, so nothing completes until a membership change re-forms the job, as in the
Oobleck authors' simulators (a 1e12 ms step).
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

from ..timing.node_counts import entry_at

#: a step where the table has no throughput (out of memory): 1e12 ms, as the simulators charge it
STALLED_STEP_S = 1e9


class ThroughputTable:
    def __init__(self, entries: Mapping, samples_per_step: int, integer_ms: bool = False, label: str = "table"):
        self.entries: Dict[int, float] = {int(n): float(v) for n, v in entries.items()}
        if not self.entries:
            raise ValueError(f"{label}: empty throughput table")
        self.samples_per_step = samples_per_step
        self.integer_ms = integer_ms
        self.label = label

    def samples_per_s(self, nodes: int) -> float:
        """The table's entry for `nodes`, clamped to its range (no interpolation)."""
        return entry_at(self.entries, nodes)

    def fits(self, nodes: int) -> bool:
        return self.samples_per_s(nodes) > 0

    def step_s(self, nodes: int, slowdown: float = 1.0) -> float:
        """Seconds of one step on `nodes` nodes; `slowdown` multiplies it (a degraded pipeline)."""
        tput = self.samples_per_s(nodes)
        if tput <= 0:
            return STALLED_STEP_S
        seconds = self.samples_per_step / tput
        if self.integer_ms:  # the simulators keep whole milliseconds, truncated, and truncates a slowed step again
            ms = int(seconds * 1000)
            if slowdown != 1.0:
                ms = int(ms * slowdown)
            return ms / 1000.0
        return seconds * slowdown


def table_for(
    tables: Mapping, method: str, samples_per_step: int, integer_ms: bool = False
) -> Optional[ThroughputTable]:
    """The method's own table, else the `default` one, else None."""
    key = method if method in tables else "default" if "default" in tables else None
    if key is None:
        return None
    return ThroughputTable(tables[key], samples_per_step, integer_ms, label=f"hardware.tables.{key}")
