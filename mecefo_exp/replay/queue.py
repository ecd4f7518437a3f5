"""The Oobleck artifact's Varuna event queue, replayed beside our checkpoint method.

The artifact decides whether a checkpoint failed by walking its event queue, a Python `heapq`
list, in storage order: a removal met before the first checkpoint-completion event fails the
checkpoint (docs/ARTIFACT.md, quirk 3). Storage order is not time order, so a removal hours
away can fail a checkpoint, and which one does depends on every push and pop of the run so
far. The only way to give the same answer is to hold the same list: this class pushes and pops
what the artifact's Varuna would, in the same order, with the same comparison (time in whole
milliseconds, then the event kind; nothing else breaks a tie).

Our checkpoint method (with `artifact_quirks`) drives it at the instants its own model reaches
the artifact's events: the job's start, a removal, a restart timeout, a completed step, a
checkpoint. Events nobody reacts to (a stale step, a checkpoint's completion) are popped on
the way. The queue only answers the checkpoint test; every time and every credited step stays
our model's.
"""

import heapq
from typing import Callable, Iterable, List, Set, Tuple

# the artifact's event kinds (its EventKind order breaks ties at one millisecond)
ADD, REMOVE, READY, TIMEOUT, STEP, CHECKPOINT = 1, 2, 4, 5, 7, 8


def ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class Keyed:
    """An event compared by (time, kind) only, as in the artifact's queues (its `Event` dataclass
    leaves its data out of the comparison): equal keys tie, and `heapq` leaves them in an order
    that is deterministic but not first-in first-out. `name`: the node, for the node events."""

    __slots__ = ("t", "kind", "name")

    def __init__(self, t, kind: int, name: str = ""):
        self.t, self.kind, self.name = t, kind, name

    def key(self) -> Tuple:
        return self.t, self.kind

    def __lt__(self, other: "Keyed") -> bool:
        return (self.t, self.kind) < (other.t, other.kind)


class ArtifactQueue:
    def __init__(self, rows: Iterable[Tuple[float, str, str]], ready_s: float, restart_s: Callable[[float], float]):
        """`rows`: the node trace's rows (seconds, "add" | "remove", name) in file order, the last
        one included; `restart_s(at)`: the restart time a timeout armed at `at` (seconds) is set
        with (the artifact's is the one its last completed rendezvous set, V:1294 calling
        V:460-540, or its initial one before any, V:277-278)."""
        self.heap: List[Keyed] = []
        for t, verb, name in rows:
            heapq.heappush(self.heap, Keyed(ms(t), ADD if verb == "add" else REMOVE, name))
        heapq.heapify(self.heap)
        self.present: Set[str] = (
            set()
        )  # the nodes added and not removed (the artifact's spot_instances)  # the artifact heapifies once more after loading the trace
        self.ready_ms = ms(ready_s)
        self.restart_s = restart_s
        self.stopped = True  # before the first ready node, as after a timeout that formed nothing

    def pop_through(self, seconds: float, kind: int) -> None:
        """Pop every event up to (`seconds`, `kind`), each with the artifact's own reaction:
        an added node's ready event, the first ready node's rendezvous, a removal's timeout."""
        key = (ms(seconds), kind)
        while self.heap and self.heap[0].key() <= key:
            self._pop()

    def pop_one_through(self, seconds: float, kind: int) -> None:
        """Pop every event before (`seconds`, `kind`), then one event of that key: the artifact
        reacts to each timeout before it pops the next of the same instant (a completed
        rendezvous pushes its first step, V:1292-1295)."""
        key = (ms(seconds), kind)
        while self.heap and self.heap[0].key() < key:
            self._pop()
        if self.heap and self.heap[0].key() == key:
            self._pop()

    def _pop(self) -> None:
        event = heapq.heappop(self.heap)
        t, k = event.key()
        if k == ADD:
            self.present.add(event.name)
            self.push(t + self.ready_ms, READY, event.name)
        elif k == READY and self.stopped and event.name in self.present:  # a removed node's is ignored (V:1305-1307)
            self.stopped = False
            self.push(t + ms(self.restart_s(t / 1000.0)), TIMEOUT)
        elif k == REMOVE:
            self.present.discard(event.name)
            self.stopped = False
            self.push(t + ms(self.restart_s(t / 1000.0)), TIMEOUT)

    def push(self, t_ms: int, kind: int, name: str = "") -> None:
        heapq.heappush(self.heap, Keyed(t_ms, kind, name))

    def keys(self) -> List[Tuple[int, int]]:
        """The list's (time, kind) in storage order."""
        return [event.key() for event in self.heap]

    def checkpoint_fails(self, step_end_s: float, write_s: float) -> bool:
        """The artifact's test of a checkpoint taken at the end of a step: its completion event
        goes in, the list is heapified, and the list is walked in storage order."""
        self.push(ms(step_end_s) + 2 * ms(write_s), CHECKPOINT)
        heapq.heapify(self.heap)
        removal_first = False
        for event in self.heap:
            kind = event.kind
            if kind == REMOVE:
                removal_first = True
            elif kind == CHECKPOINT:
                return removal_first
        return False
