"""A recorded trace replayed as it is (`failure=trace`): a CSV of time,worker,event, times in
`failure.unit`; a worker `job` row pair stops every worker up at one instant (a job-wide fault),
of the class a fourth column `fault` names (failures/classes.py; none: `all_but_storage`).
Checked before any compute: a bad row is one line naming the file and the line.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from ..bounded_read import MAX_TRACE_FILE_BYTES, InputRefused, open_bounded
from ..config import FailureConfig
from .base import TimeBase
from .classes import CLASSES
from .events import FAIL, JOB, RECOVER, FailureEvent, TraceError
from .trace import Trace


@dataclass
class Config(FailureConfig):
    path: Optional[str] = None  # a CSV of time, worker, event (time in `unit`)


def check(f, n_workers: int) -> Optional[str]:
    if not f.path:
        return "failure.path is required for failure=trace (a CSV of time,worker,event)"
    # read it now, before any compute: a NaN, infinite or negative time, an unknown event or worker
    # is one line naming the file and the line (times in any unit: the check is on the numbers as written)
    try:
        read_trace_csv(f.path, n_workers, 1.0)
    except TraceError as e:
        return str(e)
    return None


def make(f, base: TimeBase) -> Trace:
    nan = float("nan")
    events = read_trace_csv(f.path, base.n_workers, base.unit_s)
    return Trace(
        events,
        base.n_workers,
        base.horizon_s,
        {"failures": nan, "unit_failures": nan, "mean_workers_down": nan},
        "a replayed trace: no expectation",
    )


def read_trace_csv(path: str, n_workers: int, unit_s: float) -> List[FailureEvent]:
    """Parse and validate a CSV of time,worker,event; errors name the line."""
    p = Path(path)
    if not p.exists():
        raise TraceError(f"failure.path={path}: no such file")
    if not p.is_file():  # a FIFO or a device would block the read before anything runs
        raise TraceError(f"failure.path={path}: not a regular file")
    events, alive, last_t, job_open = [], [True] * n_workers, 0.0, None
    try:
        # bounded before a byte is read (a sparse file of gigabytes); -sig: a BOM some editors write is not data
        with open_bounded(p, MAX_TRACE_FILE_BYTES, "failure.path=", newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except InputRefused as e:
        raise TraceError(str(e)) from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TraceError(f"failure.path={path}: cannot be read as a CSV text file of time,worker,event ({e})") from None
    if not rows:
        raise TraceError(f"{path}: empty file, expected a header time,worker,event")
    header = [c.strip().lower() for c in rows[0]]
    classed = header[3:] == ["fault"]  # trace.csv of a run whose whole-job faults name their class
    if len(header) != 3 + classed or not header[0].startswith("time") or header[1:3] != ["worker", "event"]:
        raise TraceError(
            f"{path} line 1: header must be time,worker,event (or time,worker,event,fault) (got {','.join(rows[0])})"
        )
    width = len(header)
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != width:
            raise TraceError(f"{path} line {lineno}: expected {width} fields {','.join(header)}, got {len(row)}")
        fault = row[3].strip() if classed else ""
        if fault and (fault not in CLASSES or row[1].strip().lower() != "job"):
            raise TraceError(
                f"{path} line {lineno}: fault {fault!r}: a class of a `job` row; allowed: {', '.join(CLASSES)}"
            )
        try:
            t, w = float(row[0]), JOB if row[1].strip().lower() == "job" else int(row[1])
        except ValueError:
            raise TraceError(
                f"{path} line {lineno}: time must be a number and worker an integer (got {row[0]!r}, {row[1]!r})"
            ) from None
        if not math.isfinite(t) or t < 0:
            raise TraceError(f"{path} line {lineno}: time must be a finite number >= 0 (got {row[0]!r})")
        kind = row[2].strip().lower()
        if kind not in (FAIL, RECOVER):
            raise TraceError(f"{path} line {lineno}: event {row[2]!r} unknown; allowed: fail, recover")
        if job_open is not None and not (w == JOB and kind == RECOVER and t == last_t):
            raise TraceError(
                f"{path} line {lineno}: the `job` fail of line {job_open} (every worker up stops) must be "
                "followed by a `job` recover row at its time"
            )
        if w == JOB and kind == RECOVER and job_open is None:
            raise TraceError(f"{path} line {lineno}: a `job` recover row must follow a `job` fail row at its time")
        job_open = lineno if w == JOB and kind == FAIL else None
        if w != JOB and not 0 <= w < n_workers:
            raise TraceError(f"{path} line {lineno}: worker {w} does not exist (0..{n_workers - 1})")
        if t < last_t:
            raise TraceError(
                f"{path} line {lineno}: time {t} is before the previous row's time {last_t} "
                "(rows must be in time order)"
            )
        if w != JOB:
            if kind == FAIL and not alive[w]:
                raise TraceError(f"{path} line {lineno}: worker {w} fails while already down")
            if kind == RECOVER and alive[w]:
                raise TraceError(f"{path} line {lineno}: worker {w} recovers while alive")
            alive[w] = kind == RECOVER
        last_t = t
        if not math.isfinite(t * unit_s):
            raise TraceError(
                f"{path} line {lineno}: time {row[0]} is too large: {t:g} x {unit_s:g} s per unit overflows"
            )
        events.append(FailureEvent(t * unit_s, w, kind, fault))
    if job_open is not None:
        raise TraceError(
            f"{path} line {job_open}: the `job` fail (every worker up stops) must be followed by a `job` "
            "recover row at its time"
        )
    return events
