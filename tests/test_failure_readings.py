"""Readings of "a failure every every_h hours, recovery after recover_h hours" (faults.py).

Fast, pure Python: traces are drawn, never trained on."""

import math
import random
from collections import defaultdict

import pytest

from conftest import compose_cfg
from mecefo_exp.config import validate
from mecefo_exp.failures import FAIL, RECOVER, TraceError, make_trace
from mecefo_exp.failures.trace_file import read_trace_csv

HOUR = 3600.0


def failure_cfg(*overrides):
    return compose_cfg(list(overrides)).failure


def by_instant(events, kind):
    """{time: sorted workers} of the events of one kind."""
    out = defaultdict(list)
    for e in events:
        if e.kind == kind:
            out[e.time].append(e.worker)
    return {t: sorted(ws) for t, ws in out.items()}


def replay(events, n_workers):
    """Walk the trace; assert nobody fails while down or recovers while up; return the fail instants."""
    alive = [True] * n_workers
    for e in events:
        if e.kind == FAIL:
            assert alive[e.worker], f"worker {e.worker} fails at {e.time} while down"
        else:
            assert not alive[e.worker], f"worker {e.worker} recovers at {e.time} while up"
        alive[e.worker] = e.kind == RECOVER
    return sorted(by_instant(events, FAIL))


# ------------------------------------------------------------------ the default reading is today's
def old_make_trace(f, n_workers, step_s, max_steps, seed, paper_run_h=12.4):
    """The trace drawer before the readings existed, verbatim in substance (the reference)."""
    run_s = step_s * max_steps
    horizon = run_s * f.horizon_factor
    workers = list(f.workers) if f.workers is not None else list(range(n_workers))
    if f.kind == "paper" or f.unit == "hours":
        unit_s = run_s / paper_run_h
    elif f.unit == "steps":
        unit_s = step_s
    else:
        unit_s = 1.0
    if f.kind == "paper":
        rate = 1.0 / (f.paper_workers * f.every_h * unit_s)
        repair = f.recover_h * unit_s
    else:
        rate = 1.0 / (f.mtbf * unit_s)
        repair = f.mttr * unit_s
    events = []
    for w in workers:
        rng = random.Random(f"mecefo-trace:{seed}:{w}")
        t = 0.0
        while True:
            t += rng.expovariate(rate)
            if t >= horizon:
                break
            events.append((t, w, FAIL))
            t += repair
            if t < horizon:
                events.append((t, w, RECOVER))
    cycle = 1.0 / rate + repair
    expected = {"failures": len(workers) * run_s / cycle, "mean_workers_down": len(workers) * repair / cycle}
    return sorted(events, key=lambda e: (e[0], e[2] != RECOVER, e[1])), expected


@pytest.mark.parametrize("preset", ["low", "medium", "high", "asymmetric", "poisson"])
def test_the_default_reading_draws_exactly_the_old_trace(preset):
    f = failure_cfg(f"failure={preset}")
    assert (f.process, f.unit_gpus, f.repair) == ("per_worker", 1, "fixed")
    for seed in range(4):
        for n, step_s, steps in ((8, 0.01, 300), (4, 0.37, 1000)):
            trace = make_trace(f, n, step_s, steps, seed)
            ref_events, ref_expected = old_make_trace(f, n, step_s, steps, seed)
            assert ref_events
            assert [(e.time, e.worker, e.kind) for e in trace.events] == ref_events  # bit for bit
            assert trace.expected["failures"] == ref_expected["failures"]
            assert trace.expected["mean_workers_down"] == ref_expected["mean_workers_down"]
            assert trace.expected["unit_failures"] == ref_expected["failures"]


def test_poisson_reads_mttr():
    f = failure_cfg("failure=poisson", "failure.mtbf=50", "failure.mttr=7")
    trace = make_trace(f, 4, 0.1, 1000, seed=1)
    fails = {w: [e.time for e in trace.events if e.worker == w and e.kind == FAIL] for w in range(4)}
    recs = {w: [e.time for e in trace.events if e.worker == w and e.kind == RECOVER] for w in range(4)}
    for w in range(4):
        for tf, tr in zip(fails[w], recs[w]):
            assert tr - tf == pytest.approx(7 * 0.1)


# ------------------------------------------------------------------ units of several GPUs
def test_per_worker_units_of_8_fail_whole_consecutive_blocks_at_once():
    f = failure_cfg("failure=high", "failure.unit_gpus=8")
    blocks = [list(range(0, 8)), list(range(8, 16))]
    seen = set()
    for seed in range(5):
        trace = make_trace(f, 16, 0.01, 300, seed)
        assert trace.events
        replay(trace.events, 16)
        for kind in (FAIL, RECOVER):
            for t, ws in by_instant(trace.events, kind).items():
                assert ws in blocks, f"{kind} at {t}: workers {ws} are not one whole unit"
                seen.add(ws[0] // 8)
        # the unit's own stream: unit 0's trace does not depend on unit 1 existing
        assert [e for e in trace.events if e.worker < 8] == make_trace(f, 8, 0.01, 300, seed).events
    assert seen == {0, 1}
    # per unit: rate 1 / ((32 / 8) * every_h): the paper's 4 machines see one failure every every_h
    exp = make_trace(f, 16, 0.01, 300, 0).expected
    cycle = 4 * 0.5 + 2.0  # paper hours
    assert exp["unit_failures"] == pytest.approx(2 * 12.4 / cycle)
    assert exp["failures"] == pytest.approx(8 * exp["unit_failures"])
    assert exp["mean_workers_down"] == pytest.approx(16 * 2.0 / cycle)


def test_a_unit_fails_only_if_all_its_workers_are_failable():
    f = failure_cfg("failure=high", "failure.unit_gpus=4", "failure.workers=[0,1,2,3,5]")
    workers = set()
    for seed in range(5):
        workers |= {e.worker for e in make_trace(f, 8, 0.01, 300, seed).events}
    assert workers == {0, 1, 2, 3}
    g = failure_cfg("failure=high", "failure.unit_gpus=4", "failure.workers=[0,1,2]")
    trace = make_trace(g, 8, 0.01, 300, 0)
    assert trace.events == [] and trace.expected["failures"] == 0


# ------------------------------------------------------------------ cluster-wide arrivals
def test_cluster_process_draws_one_arrival_every_every_h():
    # low: load 4 h / 2 h = 2 units down on average of 8: almost no arrival is dropped
    f = failure_cfg("failure=low", "failure.process=cluster", "failure.horizon_factor=50")
    trace = make_trace(f, 8, 0.01, 1000, seed=7)
    instants = replay(trace.events, 8)
    arrivals = 12.4 * 50 / 2.0  # paper hours of the horizon / every_h = 310
    assert abs(len(instants) - arrivals) < 0.25 * arrivals
    # the rate does not grow with the cluster: 32 workers see as many failures
    big = make_trace(f, 32, 0.01, 1000, seed=7)
    assert abs(len(replay(big.events, 32)) - arrivals) < 0.25 * arrivals
    # a repair shorter than any gap: nothing is dropped, every arrival is a failure
    quick = make_trace(
        failure_cfg("failure=low", "failure.process=cluster", "failure.repair=replace", "failure.replace_s=1"),
        8,
        0.01,
        1000,
        seed=7,
    )
    assert abs(len(replay(quick.events, 8)) - arrivals) < 0.25 * arrivals


def test_cluster_process_never_fails_a_unit_that_is_down():
    # high with 2 units of 4: offered load 2 h / 0.5 h = 4 units, so most arrivals find both down
    f = failure_cfg("failure=high", "failure.process=cluster", "failure.unit_gpus=4")
    for seed in range(5):
        trace = make_trace(f, 8, 0.01, 300, seed)
        instants = replay(trace.events, 8)  # asserts fail only while up
        for ws in by_instant(trace.events, FAIL).values():
            assert ws in ([0, 1, 2, 3], [4, 5, 6, 7])
        assert len(instants) < 0.7 * 12.4 * 50 / 0.5  # dropped arrivals
    assert make_trace(f, 8, 0.01, 300, 3).events == make_trace(f, 8, 0.01, 300, 3).events
    assert make_trace(f, 8, 0.01, 300, 3).events != make_trace(f, 8, 0.01, 300, 4).events


# ------------------------------------------------------------------ repair readings and the clock
@pytest.mark.parametrize("real_time", [False, True])
def test_tick_repair_recovers_on_multiples_of_recover_h(real_time):
    f = failure_cfg("failure=high", "failure.repair=tick")
    step_s = 0.01
    steps = 100 * 3600 if real_time else 300  # real time: a run of 10 hours
    tick = 2.0 * (HOUR if real_time else step_s * steps / 12.4)  # recover_h in simulated seconds
    for process in ("per_worker", "cluster"):
        f.process = process
        trace = make_trace(f, 8, step_s, steps, seed=2, real_time=real_time)
        replay(trace.events, 8)
        recs = [e for e in trace.events if e.kind == RECOVER]
        assert recs
        for e in recs:
            assert e.time / tick == pytest.approx(round(e.time / tick), abs=1e-9)
        for w in range(8):  # back at the first tick after the failure
            mine = [e for e in trace.events if e.worker == w]
            for a, b in zip(mine, mine[1:]):
                if a.kind == FAIL:
                    assert b.kind == RECOVER and b.time == pytest.approx((math.floor(a.time / tick) + 1) * tick)


def test_replace_repair_recovers_after_replace_s():
    f = failure_cfg("failure=high", "failure.repair=replace", "failure.replace_s=450")
    trace = make_trace(f, 8, 1.0, 36000, seed=1, real_time=True)
    pairs = 0
    for w in range(8):
        mine = [e for e in trace.events if e.worker == w]
        for a, b in zip(mine, mine[1:]):
            if a.kind == FAIL:
                assert b.time - a.time == pytest.approx(450.0, abs=1e-6)
                pairs += 1
    assert pairs > 0
    # scaled clock: 450 paper seconds = 450 / 3600 paper hours of run_s / paper_run_h each
    step_s, steps = 0.01, 300
    scaled = make_trace(f, 8, step_s, steps, seed=1)
    for w in range(8):
        mine = [e for e in scaled.events if e.worker == w]
        for a, b in zip(mine, mine[1:]):
            if a.kind == FAIL:
                assert b.time - a.time == pytest.approx(450 / 3600 * step_s * steps / 12.4)


def test_real_time_uses_3600_s_per_hour_whatever_the_step():
    f = failure_cfg("failure=high", "failure.horizon_factor=1")
    short = make_trace(f, 8, 0.5, 100_000, seed=4, real_time=True)  # 50,000 s
    long = make_trace(f, 8, 2.0, 100_000, seed=4, real_time=True)  # 200,000 s
    assert short.events and short.events == [e for e in long.events if e.time < short.horizon_s]
    assert long.expected["failures"] == pytest.approx(8 * 200_000 / ((32 * 0.5 + 2) * HOUR))
    # the scaled clock, by contrast, stretches with the run
    a, b = make_trace(f, 8, 0.5, 1000, seed=4), make_trace(f, 8, 2.0, 1000, seed=4)
    assert [e.time * 4 for e in a.events] == pytest.approx([e.time for e in b.events])


# ------------------------------------------------------------------ expectations vs what is drawn
def empirical(f, n, run_s, seeds):
    stats = [make_trace(f, n, 1.0, int(run_s), seed=s, real_time=True).stats_until(run_s) for s in range(seeds)]
    return (sum(s["failures"] for s in stats) / seeds, sum(s["mean_workers_down"] for s in stats) / seeds)


@pytest.mark.parametrize(
    "overrides, tol",
    [
        (["failure.repair=fixed"], 0.05),
        (["failure.repair=replace", "failure.replace_s=1800"], 0.05),
        (["failure.repair=tick"], 0.05),
        (["failure.repair=fixed", "failure.unit_gpus=4"], 0.08),
        (["failure.process=cluster"], 0.05),
        (["failure.process=cluster", "failure.repair=replace", "failure.replace_s=5400"], 0.05),
        (["failure.process=cluster", "failure.repair=tick"], 0.05),
        (["failure.process=cluster", "failure.unit_gpus=2"], 0.05),
    ],
)
def test_expected_matches_the_long_run_average(overrides, tol):
    f = failure_cfg("failure=high", "failure.horizon_factor=1", *overrides)
    run_s = 4000 * HOUR  # per worker ~200 failures; real time so the rates do not rescale
    trace = make_trace(f, 8, 1.0, int(run_s), seed=0, real_time=True)
    exp = trace.expected
    assert exp["failures"] == pytest.approx(f.unit_gpus * exp["unit_failures"])
    fails, down = empirical(f, 8, run_s, seeds=4)
    assert fails == pytest.approx(exp["failures"], rel=tol), trace.expected_how
    assert down == pytest.approx(exp["mean_workers_down"], rel=tol), trace.expected_how


def test_tick_expectation_is_exact_over_a_short_run():
    """Tick: every unit is up at each tick, so the formula holds for a run of any length."""
    f = failure_cfg("failure=high", "failure.repair=tick", "failure.horizon_factor=1")
    seeds = 400
    for process in ("per_worker", "cluster"):
        f.process = process
        run_s = 5.0 * HOUR  # 2.5 tick intervals
        exp = make_trace(f, 8, 1.0, int(run_s), seed=0, real_time=True).expected
        stats = [make_trace(f, 8, 1.0, int(run_s), seed=s, real_time=True).stats_until(run_s) for s in range(seeds)]
        fails = [s["failures"] for s in stats]
        down = [s["mean_workers_down"] for s in stats]
        sd_f = (sum((x - exp["failures"]) ** 2 for x in fails) / seeds) ** 0.5
        sd_d = (sum((x - exp["mean_workers_down"]) ** 2 for x in down) / seeds) ** 0.5
        assert sum(fails) / seeds == pytest.approx(exp["failures"], abs=4 * sd_f / seeds**0.5)
        assert sum(down) / seeds == pytest.approx(exp["mean_workers_down"], abs=4 * sd_d / seeds**0.5)
    # the mean wait to the next tick is about recover_h / 2 when failures per interval are rare
    f.process = "per_worker"
    exp = make_trace(f, 1, 1.0, int(2000 * HOUR), seed=0, real_time=True).expected
    mean_down_h = exp["mean_workers_down"] * 2000 / exp["failures"]
    assert mean_down_h == pytest.approx(2.0 / 2, rel=0.05)


@pytest.mark.parametrize(
    "down",
    [
        ["failure.repair=replace", "failure.replace_s=1e12"],
        ["failure.repair=replace", "failure.replace_s=144000"],
        ["failure.repair=replace", "failure.replace_s=1e12", "failure.process=cluster"],
    ],
)
def test_a_down_time_as_long_as_the_run_gives_the_failures_that_happen(down):
    """Per worker with a down time at least the run's (replace_s=1e12; 40 h here): a unit fails at
    most once. The stationary formula said 0.076 failures where 4,576 happened."""
    f = failure_cfg("failure=high", "failure.horizon_factor=1", *down)
    run_s, seeds = 40.0 * HOUR, 100
    exp = make_trace(f, 64, 1.0, int(run_s), seed=0, real_time=True).expected
    stats = [make_trace(f, 64, 1.0, int(run_s), seed=s, real_time=True).stats_until(run_s) for s in range(seeds)]
    for key in ("failures", "mean_workers_down"):
        values = [s[key] for s in stats]
        sd = (sum((x - exp[key]) ** 2 for x in values) / seeds) ** 0.5
        assert sum(values) / seeds == pytest.approx(exp[key], abs=4 * sd / seeds**0.5 + 1e-9), (key, exp)


# ------------------------------------------------------------------ the Llama 3 preset
def test_the_llama3_preset_is_a_per_gpu_rate():
    cfg = compose_cfg(["failure=llama3"])
    validate(cfg)
    f = cfg.failure
    assert (f.kind, f.process, f.unit_gpus, f.repair, f.paper_workers) == ("paper", "per_worker", 1, "replace", 16384)
    assert f.replace_s == 600
    per_gpu_per_h = 1.0 / (f.paper_workers * f.every_h)
    assert per_gpu_per_h == pytest.approx(419 / (54 * 24 * 16384), rel=1e-12)
    # the whole Llama 3 cluster on a real clock over the 54 days: about 419 failures
    f.horizon_factor = 1
    run_s = 54 * 24 * HOUR
    trace = make_trace(f, 16384, 1.0, int(run_s), seed=0, real_time=True)
    assert trace.expected["failures"] == pytest.approx(419, rel=1e-3)
    assert abs(trace.stats_until(run_s)["failures"] - 419) < 5 * 419**0.5
    # each failed GPU is replaced 600 s later
    mine = defaultdict(list)
    for e in trace.events:
        mine[e.worker].append(e)
    for evs in mine.values():
        for a, b in zip(evs, evs[1:]):
            if a.kind == FAIL:
                assert b.time - a.time == pytest.approx(600.0, abs=1e-6)
    # 8 workers: the same per-GPU rate, so 8 / 16384 of the cluster's failures
    small = make_trace(f, 8, 1.0, int(run_s), seed=0, real_time=True)
    assert small.expected["failures"] == pytest.approx(419 * 8 / 16384, rel=1e-3)


# ------------------------------------------------------------------ CSV times
@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "-1.0"])
def test_a_trace_csv_time_must_be_finite_and_not_negative(tmp_path, bad):
    path = tmp_path / "t.csv"
    path.write_text(f"time,worker,event\n1.0,0,fail\n{bad},0,recover\n")
    with pytest.raises(TraceError, match=r"line 3: time must be a finite number >= 0"):
        read_trace_csv(str(path), n_workers=2, unit_s=1.0)


def test_a_trace_csv_going_backwards_names_both_times(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("time,worker,event\n5,0,fail\n3,0,recover\n")
    with pytest.raises(
        TraceError, match=r"line 3: time 3.0 is before the previous row's time 5.0 \(rows must be in time order\)"
    ):
        read_trace_csv(str(path), n_workers=2, unit_s=1.0)
