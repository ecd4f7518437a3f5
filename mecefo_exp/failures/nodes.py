"""Node traces as spot-instance clusters produce them (`failure=nodes`).

A row is `t,add|remove,name` (t in milliseconds, no header: the format of the spot-instance
traces in the Oobleck artifact, docs/ARTIFACT.md). Nodes come and go under their names; the harness maps them onto
`cluster.n_workers` worker slots, which must hold the most nodes the trace has at once:

- an added node takes the lowest free slot and is usable `node_ready_s` later (its slot
  recovers then); a removed node never returns under its name (its slot fails, then is free);
- the trace may start after t=0: the job's first rendezvous begins when the first node is
  usable and takes the method's `job_start_s`; every node usable by then joins it, the other
  slots start empty (`initial_down`); a trace that removes every such node before the
  rendezvous completes is refused (the job would start with no node);
- a node removed before it is usable never joins, and the job never hears of it; one removed at
  the instant it becomes usable was usable. A study may read a removal otherwise
  (`failure.node_readiness` names a subclass of `Readiness`, the replay's in replay/node_readiness.py);
- the last row's time is the hard stop (`stop_s`): nothing at or after it is applied, and the
  run ends with the last step that completes before it.

Slots freed before the first rendezvous completes are not reused until then, so a removal that
falls in the start-up is still heard, after it, as the failure of the node it removed.
"""

from __future__ import annotations

import csv
import functools
import heapq
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from ..bounded_read import MAX_TRACE_FILE_BYTES, InputRefused, open_bounded
from ..config import FailureConfig, at_least
from ..registry import named_class
from .base import TimeBase, setting
from .events import FAIL, RECOVER, FailureEvent, TraceError
from .trace import Trace


@dataclass
class Config(FailureConfig):
    path: Optional[str] = None  # a CSV of t_ms,add|remove,name
    node_ready_s: float = field(
        default=45.0, metadata=at_least(0, "seconds")
    )  # an added node is usable this long after it is added (conf/failure/nodes.yaml: where 45 s is from)
    # how a removal meets a node's readiness, a study's own rule as "package.module:Class" (null:
    # `Readiness` below: usable from its ready instant on; a removal before, never heard)
    node_readiness: Optional[str] = None


class Readiness:
    """How a removal meets the readiness of the node it removes: whether the node was usable by then
    (then the removal is a failure of its slot) and whether removing one not yet usable is heard.

    The harness's reading: a node is usable from its ready instant on, and a removal before that is
    never heard: the node never joined."""

    #: a node removed before it is usable still fails its (empty) slot
    unusable_removal_fails = False

    def usable_when_removed(self, ready_at: float, removed_at: float) -> bool:
        return ready_at <= removed_at


def readiness_of(f) -> Readiness:
    """The rule `failure.node_readiness` names (package.module:Class), or the harness's."""
    path = setting(f, "node_readiness", None)
    if not path:
        return Readiness()
    cls = named_class(str(path))
    if not (isinstance(cls, type) and issubclass(cls, Readiness)):
        raise TypeError(f"{path} is not a subclass of mecefo_exp.failures.nodes.Readiness")
    return cls()


@dataclass
class NodeTrace:
    events: List[FailureEvent]
    stop_s: float  # the last row's time: the hard stop
    start_s: float  # the first node is usable: the first rendezvous begins
    rows: List[Tuple[float, str]]  # (seconds, add | remove) of every row, the last included
    initial_down: Set[int] = field(default_factory=set)  # slots with no usable node when the job starts
    slots_used: int = 0  # the highest slot a node took, plus one: the fewest cluster.n_workers that hold it
    slot_of: Dict[str, int] = field(default_factory=dict)  # every added node's slot, by name


def parse_rows(path: str, unit_s: float = 1e-3) -> List[Tuple[int, float, str, str]]:
    """(line number, seconds, add | remove, name) per row, checked: one line per problem."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(
            f"failure.path={path}: no such file" if not p.exists() else f"failure.path={path}: not a regular file"
        )
    try:
        with open_bounded(p, MAX_TRACE_FILE_BYTES, "failure.path=", newline="", encoding="utf-8-sig") as f:
            rows = [(n, r) for n, r in enumerate(csv.reader(f), start=1) if r and any(c.strip() for c in r)]
    except InputRefused as e:  # bounded before a byte is read (a sparse file of gigabytes)
        raise TraceError(str(e)) from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TraceError(f"failure.path={path}: cannot be read as a CSV of t_ms,add|remove,name ({e})") from None
    if not rows:
        raise TraceError(f"{path}: empty file, expected rows t_ms,add|remove,name")
    parsed, last_t = [], 0.0
    for lineno, row in rows:
        if len(row) != 3:
            raise TraceError(f"{path} line {lineno}: expected 3 fields t_ms,add|remove,name, got {len(row)}")
        try:
            t = float(row[0])
        except ValueError:
            raise TraceError(f"{path} line {lineno}: time must be a number (got {row[0]!r})") from None
        if not math.isfinite(t) or t < 0:
            raise TraceError(f"{path} line {lineno}: time must be a finite number >= 0 (got {row[0]!r})")
        if t < last_t:
            raise TraceError(
                f"{path} line {lineno}: time {row[0]} is before the previous row's (rows must be in time order)"
            )
        verb = row[1].strip().lower()
        if verb not in ("add", "remove"):
            raise TraceError(f"{path} line {lineno}: event {row[1]!r} unknown; allowed: add, remove")
        parsed.append((lineno, t * unit_s, verb, row[2].strip()))
        last_t = t
    return parsed


def _most_nodes_at_once(parsed, stop_s: float) -> int:
    count = most = 0
    for _, t, verb, _ in parsed:
        if t >= stop_s:
            break
        count += 1 if verb == "add" else -1
        most = max(most, count)
    return most


def read_node_trace(
    path: str,
    n_workers: int,
    ready_s: float,
    job_start_s: float = 0.0,
    readiness: Optional[Readiness] = None,
    unit_s: float = 1e-3,
) -> NodeTrace:
    rule = readiness or Readiness()
    parsed = parse_rows(path, unit_s)
    stop_s = parsed[-1][1]
    applied = [r for r in parsed if r[1] < stop_s]
    if not any(verb == "add" for _, _, verb, _ in applied):
        raise TraceError(
            f"{path}: no node is added before the last row (the hard stop at {stop_s:g} s): nothing can train"
        )
    start_s = next(t for _, t, verb, _ in applied if verb == "add") + ready_s
    begins = start_s + job_start_s  # the first rendezvous completes; nodes usable by then are in it
    most = _most_nodes_at_once(parsed, stop_s)
    free: List[int] = list(range(n_workers))  # a heap of empty slots
    held_back: List[int] = []  # slots freed before the first rendezvous completes
    slot_of: Dict[str, int] = {}
    seen: Set[str] = set()
    ready_at: Dict[int, float] = {}  # slot -> when its node becomes usable
    up_at_start: Set[int] = set()
    slot_of_all: Dict[str, int] = {}
    events: List[FailureEvent] = []
    gone_at_start: Set[int] = set()  # slots whose node was removed before the first rendezvous completed
    for lineno, t, verb, name in applied:
        if held_back and t >= begins:
            for slot in held_back:
                heapq.heappush(free, slot)
            held_back = []
        if verb == "add":
            if name in seen:
                raise TraceError(
                    f"{path} line {lineno}: node {name!r} was added before (a removed node never "
                    "returns under its name)"
                )
            if not free:
                raise TraceError(
                    f"{path} line {lineno}: node {name!r} is added while all {n_workers} worker slots "
                    f"hold nodes; set cluster.n_workers={most + len(held_back)} (the most nodes this trace holds "
                    "at once, and the slots of nodes removed during the start-up)"
                )
            seen.add(name)
            slot = slot_of[name] = slot_of_all[name] = heapq.heappop(free)
            ready_at[slot] = t + ready_s
            if t + ready_s <= begins:
                up_at_start.add(slot)
            elif t + ready_s < stop_s:
                events.append(FailureEvent(t + ready_s, slot, RECOVER))
            continue
        if name not in slot_of:
            why = "was removed before" if name in seen else "was never added"
            raise TraceError(f"{path} line {lineno}: node {name!r} is removed but {why}")
        slot = slot_of.pop(name)
        ready = ready_at.pop(slot)
        if not rule.usable_when_removed(ready, t):  # it never joins
            if ready <= begins:
                up_at_start.discard(slot)
            events = [e for e in events if not (e.worker == slot and e.time == ready and e.kind == RECOVER)]
            if rule.unusable_removal_fails:
                events.append(FailureEvent(t, slot, FAIL))
        else:
            events.append(FailureEvent(t, slot, FAIL))
        if t < begins:
            held_back.append(slot)
            gone_at_start.add(slot)
        else:
            heapq.heappush(free, slot)
    if not up_at_start - gone_at_start:
        # the job would start on no node: no step, no ideal (a method dividing by its nodes crashed)
        raise TraceError(
            f"{path}: every node usable by the first rendezvous (it completes at {begins:g} s) is removed "
            "before it: the job would start with no node; keep a node in the trace until then"
        )
    return NodeTrace(
        events,
        stop_s,
        start_s,
        [(t, verb) for _, t, verb, _ in parsed],
        set(range(n_workers)) - up_at_start,
        1 + max(slot_of_all.values()),
        slot_of_all,
    )


#: a start-up no method's exceeds (the Oobleck artifact's longest, Varuna's 581 s for GPT-3 6.7B): the
#: slots of nodes removed during it are held until it completes
LONGEST_START_S = 600.0


def trace_slots(path, ready_s=45.0, default=None) -> int:
    """The worker slots a node trace needs (`slots_used`, with a start-up of LONGEST_START_S): for
    `cluster.n_workers: ${node_trace_slots:${failure.path},${failure.node_ready_s},<default>}`. A trace
    that cannot be read gives `default`, so that the failure check reports it in its own line."""
    try:
        st = Path(str(path)).stat()
        return _trace_slots(str(path), st.st_mtime_ns, st.st_size, float(ready_s))
    except (OSError, TraceError, ValueError, TypeError):
        return default


@functools.lru_cache(maxsize=64)
def _trace_slots(path: str, _mtime_ns: int, _size: int, ready_s: float) -> int:
    return read_node_trace(path, 1_000_000, ready_s, job_start_s=LONGEST_START_S).slots_used


def check(f, n_workers: int) -> Optional[str]:
    if not f.path:
        return "failure.path is required for failure=nodes (a CSV of t_ms,add|remove,name)"
    try:
        rule = readiness_of(f)
    except TypeError as e:
        return f"failure.node_readiness: {e}"
    except (ImportError, AttributeError, ValueError) as e:
        return f"failure.node_readiness={f.node_readiness!r}: cannot be imported as package.module:Class ({e})"
    try:
        read_node_trace(f.path, n_workers, f.node_ready_s, readiness=rule)
    except TraceError as e:
        return str(e)
    return None


def make(f, base: TimeBase) -> Trace:
    """The node trace as the run replays it: its slots' events, its start, its hard stop."""
    ready_s = float(setting(f, "node_ready_s", 45.0))
    nodes = read_node_trace(
        f.path,
        base.n_workers,
        ready_s,
        job_start_s=base.job_start_s,
        readiness=readiness_of(f),
    )
    nan = float("nan")
    trace = Trace(
        nodes.events,
        base.n_workers,
        nodes.stop_s,
        {"failures": nan, "unit_failures": nan, "mean_workers_down": nan},
        "a replayed node trace: no expectation",
    )
    trace.stop_s, trace.start_s, trace.node_rows = nodes.stop_s, nodes.start_s, nodes.rows
    trace.initial_down, trace.node_ready_s = nodes.initial_down, ready_s
    trace.node_slot_of, trace.path = nodes.slot_of, f.path
    return trace
