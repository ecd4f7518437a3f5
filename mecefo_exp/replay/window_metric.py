"""The Oobleck authors' simulators' metric, summary.json's `window`: what a run credits over the window
from its first step's start to its last committed step's end (downtime inside it counts, after it
not), and that against the ideal of the nodes present, which a run may never exceed. The
throughput-table clock (table_clock.py) reports and checks it.
"""

from __future__ import annotations

from typing import Dict, Optional

from ..run.invariants import InvariantBroken

#: how far above 1 goodput over ideal may come from rounding alone (a table step of whole
#: milliseconds is up to 1 ms shorter than the ideal's exact seconds: 5e-6 of a 186 s step)
GOODPUT_SLACK = 1e-4


def window_summary(span, trace, table, steps: int, n_workers: int) -> Dict:
    """Their metric: credited samples (committed steps x samples per step) over the window from the
    first step's start to the last committed step's end (`span`); and goodput over ideal: those
    samples over the table's throughput integrated over the usable nodes in the window."""
    start, end = span.first_step_s, span.last_step_end_s
    samples = steps * table.samples_per_step
    out = {
        "samples_per_step": table.samples_per_step,
        "credited_samples": samples,
        "train_start_s": start,
        "last_step_end_s": end,
        "window_s": None,
        "samples_per_s": None,
        "ideal_samples": None,
        "goodput_over_ideal": None,
    }
    if start is None or end is None or end <= start:
        return out
    ideal, alive, t = 0.0, n_workers - len(trace.initial_down), start
    for ev in trace.events:  # usable nodes over time, from the trace
        if ev.time > start:
            if ev.time >= end:
                break
            ideal += (ev.time - t) * (table.samples_per_s(alive) if alive > 0 else 0.0)  # no node: no work
            t = ev.time
        alive += -1 if ev.kind == "fail" else 1
    ideal += (end - t) * (table.samples_per_s(alive) if alive > 0 else 0.0)
    out.update(
        window_s=end - start,
        samples_per_s=samples / (end - start),
        ideal_samples=ideal,
        goodput_over_ideal=samples / ideal if ideal > 0 else None,
    )
    return out


def check_goodput(window: Optional[dict]) -> None:
    """The credited samples may not exceed the ideal of the window (summary.json's `window`)."""
    if not window:
        return
    ratio, ideal, credited = (
        window.get("goodput_over_ideal"),
        window.get("ideal_samples"),
        window.get("credited_samples"),
    )
    if ratio is not None and ratio > 1 + GOODPUT_SLACK:
        raise InvariantBroken(
            f"goodput over ideal is {ratio:.4g} (credited {credited:g} samples, ideal {ideal:.6g}): "
            "a run cannot credit more work than the nodes present could do"
        )
    if ratio is None and credited and ideal is not None and ideal <= 0:
        raise InvariantBroken(
            f"{credited:g} samples credited in a window where the ideal is {ideal:g} "
            "(no node could train): a run cannot credit work no node did"
        )
