"""Seeded node traces with the features of real spot-instance traces, in the Oobleck artifact's format.

`generate(seed)` gives rows (t_ms, "add"|"remove", "node<k>") in time order, adds before removes at one
instant, k counting from 1 in the order of the add rows; no name comes back. Drawn with random.Random(seed):
- length: uniform 1-8 h in whole seconds; the last row, alone at its time, is the hard stop (not applied).
- start: at t=0, or with p 0.5 late (first adds at uniform 10 s - 20 min); 16-30 nodes (uniform); with
  p 0.25 a trickle start: 4-11 of them first, the rest uniform 10 s - 10 min later.
- 4-20 (uniform) later instants, uniform from 60 s after the last start add (the artifact's Oobleck fails on
  a removal before its first configuration) to the end, except, with p 0.6, a quiet spell of uniform
  45 min - half the run (at most 3 h). Each instant: one removal (p 0.35), a burst of 2-5
  simultaneous removals (0.2), 1-4 arrivals (0.25), a replacement (an add and a removal, 0.1), or a node
  added and removed 0-44 s later, before it is ready (0.1); with p 0.35 one instant instead removes every
  node above 15 at once.
- victims: uniform over the live nodes, not-yet-ready ones included. After the start the count stays in
  15-30 (the tables' range): removals stop at 15 and adds at 30; an instant with no room does the other.

`generate_extended(seed)` draws what this never reaches (clusters past 30 nodes, collapses to a few,
removals faster than a restart, same-millisecond events in any file order, 10-12 h traces): its
docstring has the regimes.
"""

import csv
import heapq
import random
from pathlib import Path
from typing import List, Tuple

Row = Tuple[int, str, str]

MIN_NODES, MAX_NODES = 15, 30
READY_MS = 45_000


def generate(seed: int) -> List[Row]:
    r = random.Random(seed)
    stop = r.randint(3600, 8 * 3600) * 1000
    t0 = r.randint(10, 1200) * 1000 if r.random() < 0.5 else 0
    n0 = r.randint(MIN_NODES + 1, MAX_NODES)
    rows: List[Row] = []
    live: List[str] = []
    counter = [0]

    def add(t: int) -> str:
        counter[0] += 1
        name = f"node{counter[0]}"
        live.append(name)
        rows.append((t, "add", name))
        return name

    def remove(t: int, name: str) -> None:
        live.remove(name)
        rows.append((t, "remove", name))

    start_end = t0
    if r.random() < 0.25:  # trickle start: fewer than a pipeline's 12 nodes first
        first = r.randint(4, 11)
        for _ in range(first):
            add(t0)
        start_end = t0 + r.randint(10, 600) * 1000
        for _ in range(n0 - first):
            add(start_end)
    else:
        for _ in range(n0):
            add(t0)

    lo, hi = start_end // 1000 + 60, stop // 1000 - 1
    span = hi - lo
    quiet = None
    if r.random() < 0.6 and span / 2 >= 45 * 60:
        length = r.randint(45 * 60, int(min(3 * 3600, span / 2)))
        quiet = (r.randint(lo, hi - length), length)
    m = r.randint(4, 20)
    times = []
    for _ in range(m):
        x = r.randint(lo, hi - (quiet[1] if quiet else 0))
        if quiet and x >= quiet[0]:
            x += quiet[1]
        times.append(x * 1000)
    times.sort()
    kinds = r.choices(["remove", "burst", "arrive", "replace", "flash"], [0.35, 0.2, 0.25, 0.1, 0.1], k=m)
    if r.random() < 0.35:
        kinds[r.randrange(m)] = "drain"

    pending: List[Tuple[int, int, str, str]] = [(t, i, k, "") for i, (t, k) in enumerate(zip(times, kinds))]
    heapq.heapify(pending)
    seq = m
    while pending:
        t, _, kind, name = heapq.heappop(pending)
        room_down, room_up = len(live) - MIN_NODES, MAX_NODES - len(live)
        if kind in ("remove", "burst", "drain") and room_down <= 0:
            kind = "arrive"  # at the floor: nodes arrive instead
        elif kind in ("arrive", "replace", "flash") and room_up <= 0:
            kind = "remove"  # at the ceiling: one leaves instead
        if kind == "late_remove":  # the flash node, if still there and the count allows
            if name in live and room_down > 0:
                remove(t, name)
        elif kind in ("remove", "burst", "drain"):
            k = {"remove": 1, "burst": r.randint(2, 5), "drain": room_down}[kind]
            for victim in r.sample(live, min(k, room_down)):
                remove(t, victim)
        elif kind == "arrive":
            for _ in range(min(r.randint(1, 4), room_up)):
                add(t)
        elif kind == "replace":
            victim = r.choice(live)
            add(t)
            remove(t, victim)
        elif kind == "flash":
            late = t + r.randint(0, (READY_MS - 1) // 1000) * 1000
            if late < stop:
                seq += 1
                heapq.heappush(pending, (late, seq, "late_remove", add(t)))

    rows.sort(key=lambda row: (row[0], row[1] != "add"))
    if len(live) > MIN_NODES:  # the hard stop, alone at its time
        rows.append((stop, "remove", r.choice(live)))
    else:
        counter[0] += 1
        rows.append((stop, "add", f"node{counter[0]}"))
    return rows


def write_csv(rows: List[Row], path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        for t, verb, name in rows:
            w.writerow([int(t), verb, name])


# --- regimes the draws above never reach -------------------------------------------------------------------

#: the regimes of `generate_extended`, in the order its seeds cycle through them
REGIMES = ("big", "collapse", "fast", "ties", "long")
#: the restart delays a removal has to beat in the `fast` regime (Varuna's: BERT-large, GPT-3 2.7B, 6.7B)
RESTART_MS = (60_200, 465_000, 581_000)


class _Trace:
    """Rows under construction: names node1, node2, ... in order of addition; rows keep the order
    they are written in at one instant (the file order the artifact pushes them in)."""

    def __init__(self, r: random.Random):
        self.r, self.rows, self.live, self.added_at, self.n = r, [], [], {}, 0

    def add(self, t: int) -> str:
        self.n += 1
        name = f"node{self.n}"
        self.live.append(name)
        self.added_at[name] = t
        self.rows.append((t, "add", name))
        return name

    def remove(self, t: int, name: str = None) -> str:
        name = name or self.r.choice(self.live)
        self.live.remove(name)
        self.rows.append((t, "remove", name))
        return name

    def start(self, t0: int, n0: int, staggered: bool) -> int:
        """n0 nodes from t0, all at once or staggered over up to 5 minutes; the last start add's time."""
        if not staggered:
            for _ in range(n0):
                self.add(t0)
            return t0
        t, left = t0, n0
        while left:
            k = min(left, self.r.randint(1, 8))
            for _ in range(k):
                self.add(t)
            left -= k
            if left:
                t += self.r.randint(1, 60) * 1000
        return t

    def finish(self, stop: int, floor: int) -> List[Row]:
        rows = sorted(self.rows, key=lambda row: row[0])  # stable: one instant keeps its written order
        assert all(t < stop for t, _, _ in rows)
        if len(self.live) > floor:  # the hard stop, alone at its time
            rows.append((stop, "remove", self.r.choice(self.live)))
        else:
            self.n += 1
            rows.append((stop, "add", f"node{self.n}"))
        return rows


def generate_extended(seed: int) -> List[Row]:
    """A trace of regime REGIMES[seed % 5], drawn with random.Random(1_000_000 + seed):

    - big: 31-36 nodes at t=0 or late (p 0.5), or a staggered start of 25 over up to 5 minutes that
      grows past 30; 2-6 h; 6-16 instants of removals, bursts of 2-6, arrivals of 1-4 and replacements,
      the count kept in 15-40 (the tables stop at 30: more nodes use the 30 entry).
    - collapse: 16-30 nodes; 1-3 dips: a burst that leaves 1-11 nodes (1 with p 0.4), a hold of
      2-40 minutes with 0-3 single removals or arrivals, then 10-25 arrivals at once or trickled;
      1.5-6 h.
    - fast: 20-32 nodes; one removal every P seconds, P below one of Varuna's restart delays
      (uniform 20-59 s, 120-464 s or 300-580 s), 10-40 of them; at 12 nodes or fewer 4-12 arrive at
      a removal's instant (added before or after it in the file, p 0.5 each).
    - ties: 18-30 nodes; 8-20 instants, each one coincidence at the same millisecond: a removal at
      another node's ready instant (its add + 45 s), a node removed at its own ready instant, an
      arrival at a removal's instant, an add at another node's ready instant, or a burst of 2-6
      removals; the rows of one instant in a random order (removes before adds too).
    - long: 10-12 h, 150-220 instants (300+ rows), bursts of up to 6, arrivals of up to 6,
      replacements, nodes removed before they are ready; 11-32 nodes.

    The first removal comes 60 s or more after the last start add (the artifact's Oobleck fails on
    a removal before its first configuration); no name comes back; the last row, alone at its time,
    is the hard stop."""
    r = random.Random(1_000_000 + seed)
    regime = REGIMES[seed % len(REGIMES)]
    tr = _Trace(r)
    t0 = r.randint(10, 1200) * 1000 if r.random() < 0.5 else 0
    if regime == "big":
        stop = r.randint(2 * 3600, 6 * 3600) * 1000
        staggered = r.random() < 0.4
        begun = tr.start(t0, 25 if staggered else r.randint(31, 36), staggered)
        lo, hi = begun // 1000 + 60, stop // 1000 - 1
        if staggered:  # growth past 30 soon after
            t = r.randint(lo, lo + 900) * 1000
            for _ in range(r.randint(6, 11)):
                tr.add(t)
            lo = t // 1000 + 1
        for x in sorted(r.randint(lo, hi) for _ in range(r.randint(6, 16))):
            t, kind = x * 1000, r.choice(["remove", "burst", "arrive", "replace"])
            if kind == "remove" and len(tr.live) > 15:
                tr.remove(t)
            elif kind == "burst":
                for _ in range(min(r.randint(2, 6), len(tr.live) - 15)):
                    tr.remove(t)
            elif kind == "arrive":
                for _ in range(min(r.randint(1, 4), 40 - len(tr.live))):
                    tr.add(t)
            elif kind == "replace":
                tr.add(t)
                tr.remove(t)
        return tr.finish(stop, 15)
    if regime == "collapse":
        stop = r.randint(int(1.5 * 3600), 6 * 3600) * 1000
        begun = tr.start(t0, r.randint(16, 30), r.random() < 0.2)
        t = begun + r.randint(60, 1800) * 1000
        for _ in range(r.randint(1, 3)):
            if t >= stop - 600_000:
                break
            keep = 1 if r.random() < 0.4 else r.randint(2, 11)
            while len(tr.live) > keep:
                tr.remove(t)
            hold_end = t + r.randint(120, 2400) * 1000
            for u in sorted(r.randint(t // 1000 + 1, hold_end // 1000 - 1) * 1000 for _ in range(r.randint(0, 3))):
                if r.random() < 0.5 and len(tr.live) > 1:
                    tr.remove(u)
                else:
                    tr.add(u)
            t = hold_end
            back = r.randint(10, 25)
            if r.random() < 0.5:
                for _ in range(back):
                    tr.add(t)
            else:
                while back > 0:
                    k = min(back, r.randint(1, 6))
                    for _ in range(k):
                        tr.add(t)
                    back -= k
                    t += r.randint(5, 120) * 1000
            t += r.randint(600, 3600) * 1000
        return tr.finish(stop, 1)
    if regime == "fast":
        begun = tr.start(t0, r.randint(20, 32), r.random() < 0.2)
        period = r.choice([r.randint(20, 59), r.randint(120, 464), r.randint(300, 580)]) * 1000
        t = begun + r.randint(60, 900) * 1000
        for _ in range(r.randint(10, 40)):
            if len(tr.live) <= 12:
                arrive = r.randint(4, 12)
                if r.random() < 0.5:
                    for _ in range(arrive):
                        tr.add(t)
                    tr.remove(t)
                else:
                    tr.remove(t)
                    for _ in range(arrive):
                        tr.add(t)
            else:
                tr.remove(t)
            t += period
        return tr.finish(t + r.randint(0, 3600) * 1000 + 1000, 12)
    if regime == "ties":
        stop = r.randint(2 * 3600, 6 * 3600) * 1000
        begun = tr.start(t0, r.randint(18, 30), r.random() < 0.3)
        t = begun + 60_000
        for _ in range(r.randint(8, 20)):
            t += r.randint(120, 1500) * 1000
            if t >= stop - 200_000:
                break
            kind = r.choice(["remove_at_ready", "own_ready", "arrive_at_remove", "add_at_ready", "burst"])
            at = []
            if kind in ("remove_at_ready", "own_ready", "add_at_ready"):
                new = tr.add(t)
                ready = t + READY_MS
                if kind == "remove_at_ready" and len(tr.live) > 2:
                    at.append(("remove", r.choice([n for n in tr.live if n != new])))
                elif kind == "own_ready":
                    at.append(("remove", new))
                else:
                    at.append(("add", None))
                if r.random() < 0.5:  # and another event of the same millisecond
                    at.append(r.choice([("add", None), ("remove", None)]))
                t = ready
            elif kind == "arrive_at_remove":
                at = [("remove", None)] + [("add", None)] * r.randint(1, 4)
            else:
                at = [("remove", None)] * r.randint(2, 6)
            r.shuffle(at)
            for verb, name in at:
                if verb == "add" and len(tr.live) < 34:
                    tr.add(t)
                elif verb == "remove" and len(tr.live) > 13 and (name is None or name in tr.live):
                    tr.remove(t, name)
        return tr.finish(stop, 13)
    # long
    stop = r.randint(10 * 3600, 12 * 3600) * 1000
    begun = tr.start(t0, r.randint(16, 32), r.random() < 0.2)
    lo, hi = begun // 1000 + 60, stop // 1000 - 60
    for x in sorted(r.randint(lo, hi) for _ in range(r.randint(150, 220))):
        t, kind = x * 1000, r.choices(["remove", "burst", "arrive", "replace", "flash"], [0.3, 0.2, 0.3, 0.1, 0.1])[0]
        if kind in ("remove", "burst") and len(tr.live) > 11:
            for _ in range(min(1 if kind == "remove" else r.randint(2, 6), len(tr.live) - 11)):
                tr.remove(t)
        elif kind == "arrive" or len(tr.live) <= 11:
            for _ in range(min(r.randint(1, 6), 32 - len(tr.live))):
                tr.add(t)
        elif kind == "replace":
            tr.add(t)
            tr.remove(t)
        elif kind == "flash" and len(tr.live) < 32:
            name = tr.add(t)
            late = t + r.randint(0, (READY_MS - 1) // 1000) * 1000
            if late < stop - 60_000:
                tr.rows.append((late, "remove", name))
                tr.live.remove(name)
    return tr.finish(stop, 11)
