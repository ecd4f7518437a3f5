"""The event-driven numerics-free loop against the step-by-step one: the same run.

Between two events every step costs the same, so the event-driven loop books those steps at once.
For every method, under failure=high and two failure readings, both loops must give the same
summary (steps, failures, rollbacks, lost and interrupted steps and the method's counters exactly;
simulated time and throughput within 1e-9 relative) and the same events.
"""

import math

import pytest

from conftest import read_jsonl
from mecefo_exp.methods import REGISTRY

METHODS = tuple(REGISTRY)
READINGS = {
    "per_worker": [],  # the default reading: each GPU fails on its own, back after recover_h
    "machines": ["failure.process=cluster", "failure.unit_gpus=8", "failure.repair=replace", "failure.replace_s=300"],
}
# numerics-free, 16 workers on the paper's cluster, paper time scaled: a 400-step run sees the paper run's failures
# (one paper hour is this run's failure-free duration / cluster.paper_run_h)
SHAPE = [
    "model=llama_350m",
    "model.vocab_size=512",
    "hardware=a100_32",
    "hardware.paper_time=scaled",
    "cluster.n_workers=16",
    "data.micro_batch=8",
    "data.seq_len=256",
    "trainer.numerics=false",
    "trainer.max_steps=400",
    "trainer.eval_every=0",
    "trainer.progress=none",
    "trainer.log_events=0",
    "seed=1",
]
EXACT = (
    "status",
    "steps",
    "tokens_committed",
    "tokens_processed",
    "failures",
    "rollbacks",
    "lost_steps",
    "interrupted_steps",
)


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or a == b or (math.isnan(a) and math.isnan(b))


def same_value(a, b, scale):
    """Equal, floats within 1e-9 relative (or 1e-9 of `scale` for sums that cancel to about 0)."""
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, (int, float)) and isinstance(b, (int, float)) and (close(a, b) or abs(a - b) <= 1e-9 * scale)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k], scale) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y, scale) for x, y in zip(a, b))
    return a == b


def both_loops(run_exp, *overrides):
    stepped, stepped_dir = run_exp(*SHAPE, *overrides, "trainer.event_driven=false", micro=False)
    driven, driven_dir = run_exp(*SHAPE, *overrides, micro=False)
    return (
        stepped,
        driven,
        read_jsonl(stepped_dir / "events.jsonl"),
        read_jsonl(driven_dir / "events.jsonl"),
        read_jsonl(stepped_dir / "metrics.jsonl"),
        read_jsonl(driven_dir / "metrics.jsonl"),
    )


def assert_same_run(stepped, driven, ev_stepped, ev_driven):
    for key in EXACT:
        assert driven[key] == stepped[key], key
    for key in ("sim_time_s", "throughput_tok_s"):
        assert close(driven[key], stepped[key]), (key, driven[key], stepped[key])
    scale = stepped["sim_time_s"]
    assert same_value(driven["time_breakdown"], stepped["time_breakdown"], scale)
    # the method's own counters (neighbour assignments, SVD refreshes, snapshots, degraded steps ...)
    # (and the provenance: a commit between the two runs changes git_sha, not the run)
    skip = {
        "wall_time_s",
        "updated_at",
        "run_dir",
        "config_sha256",
        "time_breakdown",
        "window",
        "git_sha",
        "git_dirty",
        "source_sha256",
    }
    for key in stepped.keys() - skip:
        assert key in driven and same_value(driven[key], stepped[key], scale), key
    assert len(ev_driven) == len(ev_stepped)
    for a, b in zip(ev_driven, ev_stepped):
        assert same_value(a, b, scale), (a, b)


@pytest.mark.parametrize(
    # whole machines failing and replaced (the longer runs) in the slow tier: make test-fingerprints
    "reading",
    [pytest.param(r, marks=pytest.mark.slow) if r == "machines" else r for r in sorted(READINGS)],
)
@pytest.mark.parametrize("method", METHODS)
def test_event_driven_equals_step_by_step(run_exp, method, reading):
    stepped, driven, ev_s, ev_d, rows_s, rows_d = both_loops(
        run_exp, f"method={method}", "failure=high", *READINGS[reading]
    )
    assert stepped["failures"] > 5  # the trace bites
    assert_same_run(stepped, driven, ev_s, ev_d)
    # the event-driven record: one row per run of equal steps, covering every committed step
    assert len(rows_d) < len(rows_s) / 2 and all(r.get("first_step", r["step"]) <= r["step"] for r in rows_d)
    last = {}
    for r in rows_d:
        for step in range(r.get("first_step", r["step"]), r["step"] + 1):
            last[step] = r
    assert sorted(last) == list(range(stepped["steps"]))
    assert close(max(r["sim_time_s"] for r in rows_d), max(r["sim_time_s"] for r in rows_s))


def test_time_triggered_rebalance_and_svd_refreshes_land_on_the_same_steps(run_exp):
    # Bamboo rebalances once a cover is rebalance_after_s paper seconds old: a timer on the clock
    stepped, driven, ev_s, ev_d, *_ = both_loops(
        run_exp, "method=bamboo", "failure=high", "method.rebalance_after_s=600", "method.checkpoint_interval=50"
    )
    assert stepped["rebalances"] > 0
    assert_same_run(stepped, driven, ev_s, ev_d)
    stepped, driven, ev_s, ev_d, *_ = both_loops(run_exp, "method=mecefo", "failure=high", "method.svd_every=7")
    assert stepped["svd_refreshes"] > 10
    assert_same_run(stepped, driven, ev_s, ev_d)


def test_reft_books_many_snapshots_in_one_pass_and_still_equals_step_by_step(run_exp):
    """A quiet run goes from one disk checkpoint to the next, past the snapshots in between: each
    still has its event at its own step and time, its charge on the step before it, and the
    failures that fall after a snapshot's charge (here the whole state copy, overlap=0) end the
    run where a step-by-step run ends it."""
    common = ("method=reft", "method.snapshot_every=3", "method.checkpoint_interval=30", "method.overlap=0")
    stepped, driven, ev_s, ev_d, rows_s, rows_d = both_loops(run_exp, *common, "failure=high")
    assert stepped["failures"] > 5 and stepped["snapshots"] > 100
    assert_same_run(stepped, driven, ev_s, ev_d)
    free, _, _, _, _, free_rows = both_loops(run_exp, *common, "failure=none")
    # 400 steps: 14 disk checkpoints, each taken alone after a quiet run (one pass per snapshot: 134)
    assert free["snapshots"] == 134 and len(free_rows) <= 2 * 14 + 1


def test_baft_books_many_bubble_checkpoints_in_one_pass_and_still_equals_step_by_step(run_exp):
    """BAFT's checkpoints (every 3 steps here, each charged what the bubble does not hide) are
    booked after a quiet run's last step, each at its own step and time, its write checked against
    the next failure from when it began."""
    common = ("method=baft", "method.checkpoint_interval=3", "method.stages=2", "method.microbatches=64")
    stepped, driven, ev_s, ev_d, rows_s, rows_d = both_loops(run_exp, *common, "failure=high")
    assert stepped["failures"] > 5 and stepped["checkpoint_charge_s"] > 0
    assert_same_run(stepped, driven, ev_s, ev_d)
    free, _, _, _, _, free_rows = both_loops(run_exp, *common, "failure=none")
    # 400 steps, 134 checkpoints (steps 0, 3, ..., 399), one row for the whole failure-free run
    assert free["steps"] == 400 and len(free_rows) == 1


def test_a_method_that_cannot_name_its_events_is_stepped(run_exp, monkeypatch, caplog):
    from mecefo_exp.methods.base import Method
    from mecefo_exp.methods.oobleck import Oobleck

    monkeypatch.setattr(Oobleck, "quiet_steps", Method.quiet_steps)
    with caplog.at_level("INFO"):
        summary, run_dir = run_exp(*SHAPE, "method=oobleck", "failure=high", micro=False)
    assert "cannot name its next event" in caplog.text
    assert len(read_jsonl(run_dir / "metrics.jsonl")) >= summary["steps"]  # one row per step


def test_a_run_of_steps_books_and_rolls_back_as_its_steps_one_by_one():
    from mecefo_exp.timing.clock import SimClock, StepCost

    cost = StepCost(compute=0.3, comm=0.1, ft_overhead=0.05, degraded_extra=0.2)
    one, runs = SimClock(), SimClock()
    for s in range(1000):
        one.commit_step(s, cost)
    runs.commit_steps(0, 400, cost)
    runs.commit_step(400, cost)
    runs.commit_steps(401, 599, cost)
    for clock in (one, runs):
        clock.add_to_step(399, "ft_overhead", 2.0)  # a checkpoint written after step 399
    assert close(runs.now, one.now, 1e-12)
    lost_one, lost_runs = one.discard_steps_from(350), runs.discard_steps_from(350)
    assert close(lost_runs, lost_one, 1e-12) and close(runs.now, one.now, 1e-12)
    for cat in one.breakdown:
        assert abs(runs.breakdown[cat] - one.breakdown[cat]) <= 1e-12 * one.now, cat
    assert runs._runs == [[0, 350, cost.as_dict()]]  # the rest of the first run and the others are gone


@pytest.mark.parametrize(
    "now, t, ending, starting",
    [
        (0.0, None, math.inf, math.inf),
        (0.0, 10.5, 10, 11),  # the failure falls in step 10: steps 0..9 end before it; steps 0..10 start before it
        (0.0, 10.0, 9, 10),  # exactly on a boundary: the step ending there is taken alone
        (5.0, 4.0, 0, 0),  # already past
        (0.0, 0.5, 0, 1),
    ],
)
def test_how_many_steps_fit_before_a_time(now, t, ending, starting):
    from mecefo_exp.timing.clock import steps_ending_by, steps_starting_before

    assert steps_ending_by(now, 1.0, t) == ending
    assert steps_starting_before(now, 1.0, t) == starting
