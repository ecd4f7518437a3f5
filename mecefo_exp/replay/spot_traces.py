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
