"""Values given per number of usable nodes (a restart's seconds, a throughput), read at any count."""

from __future__ import annotations

from typing import Mapping


def entry_at(entries: Mapping[int, float], nodes: int) -> float:
    """A per-node-count table's value at `nodes`: below its smallest count the smallest's, above
    its largest the largest's, in a gap the next smaller count's."""
    lo, hi = min(entries), max(entries)
    n = min(max(nodes, lo), hi)
    if n not in entries:
        n = max(k for k in entries if k <= n)
    return entries[n]
