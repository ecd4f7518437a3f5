"""The order in which the Oobleck artifact's event heap hands out a trace's first nodes.

Its queue compares events by (time, kind) only and is a Python `heapq`, whose order of equal keys
is deterministic but not first-in first-out: Bamboo's pipelines take the nodes in that order
(docs/ARTIFACT.md); the scenario presets' `start_order` / `node_order` are what this derives.
"""

import csv
import heapq
from typing import Dict, List, Optional, Tuple

from .queue import Keyed


def node_tie_order(
    path: str, ready_s: float, first_delay_s: float, slot_of: Optional[Dict[str, int]] = None, min_nodes: int = 1
) -> Tuple[List[int], List[int]]:
    """(registered, joined) of `first_formation`."""
    registered, joined, _ = first_formation(path, ready_s, first_delay_s, slot_of, min_nodes)
    return registered, joined


class _SlotKeyed(Keyed):
    """An event compared by (time, kind, slot): the same heap with its ties broken by worker slot."""

    __slots__ = ("slot",)

    def __init__(self, t, kind: int, name: str = "", slot: int = -1):
        super().__init__(t, kind, name)
        self.slot = slot

    def __lt__(self, other: "Keyed") -> bool:
        return (self.t, self.kind, self.slot) < (other.t, other.kind, getattr(other, "slot", -1))


def first_formation(
    path: str,
    ready_s: float,
    first_delay_s: float,
    slot_of: Optional[Dict[str, int]] = None,
    min_nodes: int = 1,
    ties_by_slot: bool = False,
) -> Tuple[List[int], List[int], Optional[float]]:
    """The order in which the Oobleck artifact's Bamboo takes a trace's first nodes, as worker slots
    (`slot_of`: by name; default: the t=0 rows in file order): (the order it registers them, its node
    map, and the order of the first rendezvous that forms at least `min_nodes`, a pipeline).

    Its queue is a binary heap keyed by (time, kind) only (add 1, remove 2, ready 4, global timeout
    5); every row is pushed in file order and the heap built again (B:1400-1420); popping an add
    registers the node and pushes its ready `ready_s` later (B:1043-1049). Stopped, a ready node
    starts a rendezvous of the ready nodes in node-map order, whose timeout is pushed
    `first_delay_s` later; the nodes that become ready meanwhile join it in the order they are
    popped (B:1106-1120, B:1159-1175); a timeout that finds a member removed starts it over
    (B:1122-1134), one with fewer than `min_nodes` stops again. Until the first pipelines form the
    heap holds nothing else, so this replays it exactly. Equal keys leave Python's heapq in an
    order that is deterministic but not first-in first-out. The third value is the time (seconds)
    that rendezvous completes (None if none ever forms a pipeline): a removal at the instant of
    its timeout comes first (kind 2 before 5) and starts it over. With `ties_by_slot` the events of
    one instant and kind leave in slot order instead (a copy of the artifact with that tie-break, the
    check docs/ARTIFACT.md describes)."""
    slot = slot_of if slot_of is not None else {name: i for i, name in enumerate(_file_order(path))}

    def event(t, kind: int, name: str = "") -> Keyed:
        return _SlotKeyed(t, kind, name, slot.get(name, -1)) if ties_by_slot else Keyed(t, kind, name)

    heap: List[Keyed] = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and not row[0].lstrip().startswith("#"):
                kind = 1 if row[1].strip().lower() == "add" else 2
                heapq.heappush(heap, event(float(row[0]) * 1e-3, kind, row[2].strip()))
    heapq.heapify(heap)
    registered: List[str] = []  # the node map, in insertion order; removals leave it
    ready: set = set()
    members: Optional[List[str]] = None  # the rendezvous collecting, None when stopped
    joined: List[str] = []
    formed_at: Optional[float] = None
    while heap:
        popped = heapq.heappop(heap)
        if popped.kind == 1:
            registered.append(popped.name)
            heapq.heappush(heap, event(popped.t + ready_s, 4, popped.name))
        elif popped.kind == 2 and popped.name in registered:
            registered.remove(popped.name)
            ready.discard(popped.name)
        elif popped.kind == 4 and popped.name in registered:
            ready.add(popped.name)
            if members is None:
                members = [n for n in registered if n in ready]
                heapq.heappush(heap, event(popped.t + first_delay_s, 5))
            elif popped.name not in members:
                members.append(popped.name)
        elif popped.kind == 5 and members is not None:
            if any(n not in registered for n in members):
                members = [n for n in registered if n in ready]
                heapq.heappush(heap, event(popped.t + first_delay_s, 5))
                continue
            joined = members
            if len(members) >= min_nodes:
                formed_at = popped.t
                break
            members = None
    return (
        [slot[name] for name in registered if name in slot],
        [slot[name] for name in joined if name in slot],
        formed_at,
    )


def _file_order(path: str) -> List[str]:
    with open(path, newline="") as f:
        return [
            row[2].strip() for row in csv.reader(f) if row and float(row[0]) == 0 and row[1].strip().lower() == "add"
        ]
