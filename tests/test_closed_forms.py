"""The simulated methods against closed forms (analysis/closed_forms.py), numerics off, seeds averaged,
tolerances from the Monte Carlo interval; and the same checks failing when a cost is misbooked."""

import math

import pytest
from omegaconf import OmegaConf

from analysis import closed_forms as cf
from analysis.anchors import (
    BASE,
    CR,
    GEMINI_CKPT_MIN,
    GEMINI_WASTED_MIN,
    KERNELS,
    checkpoint_restart_agrees,
    cr_case,
    gemini_case,
    gemini_form,
    harness_form,
    interval,
    mecefo_agrees,
    runs,
    write_profile,
)
from analysis.simulate import compose, effective_time


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return write_profile(tmp_path_factory.mktemp("profile") / "fixed.json")


@pytest.mark.slow  # two long simulated runs (~7 s): `make test-fingerprints`
@pytest.mark.parametrize("k", [60, 200])
def test_checkpoint_restart_across_the_range(profile, k):
    """T from 0.67 s to 2.2 s at M = 10 s: the simulation is Daly's higher-order form as published (a
    failure inside a write cuts it) to the Monte Carlo interval; the first-order form is far off here."""
    ok, detail = checkpoint_restart_agrees(profile, k)
    assert ok, detail
    C, R, M = 0.2, 1.0, 10.0
    # an asynchronous write, whose checkpoint stands through a failure, is above Daly by about C/M
    mean, _, daly, asynchronous = detail
    assert daly < asynchronous < daly + 0.02 and cf.first_order(C, R, M, k * 0.01122) < daly


@pytest.mark.slow  # an interval sweep (~3 s): `make test-fingerprints`
def test_checkpoint_restart_first_order_where_t_is_small(profile):
    """T << M (M = 30 s, T ~ Young's sqrt(2 C M) = 1.7 s, C/M = 0.2%): first order, Daly and the
    simulation agree to the interval."""
    C, R, M = 0.05, 0.3, 30.0
    k = round(cf.young_interval(C, M) / 0.01122)
    (mean, half), T = cr_case(profile, C, R, M, k, seeds=4, steps=400_000)
    for form in (cf.first_order, cf.daly, harness_form):
        assert abs(mean - form(C, R, M, T)) < half + 0.004, (form.__name__, mean, half, form(C, R, M, T))


@pytest.mark.slow
def test_auto_interval_is_the_optimum_of_an_interval_sweep(profile):
    """checkpoint interval=auto (Young/Daly) against a sweep of fixed intervals at M = 10 s: auto's
    interval sits within the sweep's resolution of the sweep's best, and its effective time is the
    sweep's best to the interval."""
    C, R, M = 0.2, 1.0, 10.0
    sweep = {k: cr_case(profile, C, R, M, k, seeds=3, steps=300_000)[0] for k in (40, 80, 120, 160, 240, 360)}
    best = max(sweep, key=lambda k: sweep[k][0])
    base = compose(
        BASE
        + CR
        + [
            f"cluster.profile={profile}",
            f"hardware.checkpoint_s={C}",
            f"method.restart_s={R}",
            f"failure.mtbf={M}",
            "method.checkpoint_interval=auto",
            "trainer.max_steps=300000",
        ]
    )
    auto = runs(base, 3)
    k_auto = auto[0]["checkpoint_interval"]
    mean, half = interval([effective_time(s) for s in auto])
    ks = sorted(sweep)
    i = ks.index(best)
    assert ks[max(0, i - 1)] <= k_auto <= ks[min(len(ks) - 1, i + 1)], (k_auto, best, sweep)
    assert mean > sweep[best][0] - sweep[best][1] - half, (mean, sweep)


@pytest.mark.slow  # long simulated runs (~6 s): `make test-fingerprints`
def test_mecefo_throughput_from_the_stationary_distribution_of_failed_workers(profile):
    """MeCeFO in synchronous DP: the step is the neighbour's pair (1.5x the compute) whenever any
    worker is down, q = 1 - 0.95^8 of the time, and each failure loses half a step. Simulation vs
    that closed form, to the interval; the mean workers down is 8 p."""
    ok, (mean, half, form, down, fatal) = mecefo_agrees(profile)
    assert ok, (mean, half, form, fatal)
    assert down == pytest.approx(8 * form["p"], rel=0.1)


def _half_write(self, nbytes=None):
    return 0.5 * ORIGINAL["write"](self, nbytes)


def _double_restart(self):
    return 2.0 * ORIGINAL["restart"](self)


def _pair_as_normal(self, plan):
    from mecefo_exp.methods.base import Method
    from mecefo_exp.plan import FailureFreePlan

    return Method.step_cost(self, FailureFreePlan(plan.step, self.n))


ORIGINAL = {}


@pytest.mark.slow
@pytest.mark.parametrize(
    "misbooking",
    ["restart charged twice", "checkpoint write charged half", "neighbour pair charged as a normal micro-batch"],
)
def test_a_misbooked_cost_breaks_its_closed_form(profile, monkeypatch, misbooking):
    """Each check above fails when the cost it rests on is booked wrongly."""
    from mecefo_exp.methods.mecefo import Mecefo
    from mecefo_exp.methods.rollback import RollbackMethod
    from mecefo_exp.timing.clock import CostModel

    ORIGINAL.update(write=CostModel.storage_write_s, restart=RollbackMethod.restart_s)
    if misbooking == "restart charged twice":
        monkeypatch.setattr(RollbackMethod, "restart_s", _double_restart)
        ok, detail = checkpoint_restart_agrees(profile, 200)
    elif misbooking == "checkpoint write charged half":
        monkeypatch.setattr(CostModel, "storage_write_s", _half_write)
        ok, detail = checkpoint_restart_agrees(profile, 200)
    else:
        monkeypatch.setattr(Mecefo, "step_cost", _pair_as_normal)
        ok, detail = mecefo_agrees(profile)
    assert not ok, detail


def test_reft_snapshot_overhead_is_its_stall_per_snapshot(profile):
    """REFT without failures: a snapshot every 5 steps stalls (1 - overlap) of a state copy; the useful
    fraction is 5 step / (5 step + stall), exactly."""
    base = compose(
        BASE
        + [
            "method=reft",
            f"cluster.profile={profile}",
            "failure=none",
            "trainer.max_steps=5000",
            "method.checkpoint_interval=100000",
        ]
    )
    s = runs(base, 1)[0]
    step, snapshot_s = s["clock"]["failure_free_step_s"], s["snapshot_charge_s"]
    assert snapshot_s == pytest.approx((1 - 0.9) * KERNELS["state_copy"], rel=1e-9)
    snapshots = s["snapshots"] if "snapshots" in s else 5000 // 5
    assert s["time_breakdown"]["ft_overhead"] == pytest.approx(snapshots * snapshot_s, rel=1e-6)
    assert effective_time(s) == pytest.approx(cf.snapshot_effective(step, 5, snapshot_s), rel=1e-4)


def test_failure_counts_and_time_with_k_down_are_the_renewal_expectations():
    """Per-unit Poisson failures, fixed repair: the count of failures is the renewal expectation to
    its Poisson interval, and the time with k units down is Binomial(U, p) to a few per cent."""
    from mecefo_exp.failures import make_trace

    cfg = OmegaConf.create(
        {
            "name": "poisson",
            "kind": "poisson",
            "mtbf": 19.0,
            "mttr": 1.0,
            "unit": "seconds",
            "process": "per_worker",
            "unit_gpus": 1,
            "repair": "fixed",
            "workers": None,
            "horizon_factor": 1.0,
            "replace_s": 0.0,
        }
    )
    U, run_s = 32, 20_000.0
    trace = make_trace(cfg, U, 1.0, int(run_s), seed=5, real_time=True)
    fails = sum(1 for e in trace.events if e.kind == "fail")
    expected = cf.renewal_failures(U, 1 / 19.0, 1.0, run_s)
    assert abs(fails - expected) < 3.29 * math.sqrt(expected)
    time_at = [0.0] * 5
    down, last = 0, 0.0
    for e in trace.events:
        time_at[min(down, 4)] += e.time - last
        down, last = down + (1 if e.kind == "fail" else -1), e.time
    time_at[min(down, 4)] += run_s - last
    p = cf.down_probability(1 / 19.0, 1.0)
    for k, prob in enumerate(cf.binomial_down(U, p, 4)):
        assert time_at[k] / run_s == pytest.approx(prob, abs=0.02), (k, time_at, prob)


@pytest.mark.parametrize("mtbf_min, expected_min", [(24 * 60, 117.0), (6 * 60, 57.0), (15, 9.1)])
def test_the_auto_interval_is_dalys_with_his_worked_examples(mtbf_min, expected_min):
    """Daly (2006), worked examples with a 5-minute write (and a 10-minute restart, which his
    optimum does not depend on): 117 min at M = 24 h, 57 min at 6 h, 9.1 min at 15 min."""
    from mecefo_exp.methods.intervals import daly_interval, young_interval

    tau = daly_interval(5.0, mtbf_min)
    assert tau == pytest.approx(expected_min, abs=0.5 if expected_min > 10 else 0.05)  # his rounding
    assert abs(tau - expected_min) < abs(young_interval(5.0, mtbf_min) - expected_min)  # Young's is further off


@pytest.mark.slow  # (~3 s): `make test-fingerprints`
def test_gemini_anchor_lost_time_per_failure_is_the_blocking_writes_and_not_geminis(profile):
    """Gemini's 105 minutes per failure (t_ckpt + 1/(2f) + t_rtvl with t_ckpt = 1/f = t_rtvl = 42 min)
    assume writes that overlap training; the harness's checkpoint-restart stops training for a write,
    and its lost time per failure is its own closed form (84 min), which this test holds it to."""
    G = GEMINI_CKPT_MIN
    (lost,) = gemini_case(profile, minute_s=1.0, mtbfs=300, seeds=1)  # minutes as seconds: the same ratios
    assert lost == pytest.approx(gemini_form(G, G, G), abs=4.0)
    assert GEMINI_WASTED_MIN - lost > 12.0
