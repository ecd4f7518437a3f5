"""Bamboo and Oobleck: exact under failures (the failure-free loss curve bit for bit), charged
only for their mechanism: Bamboo's redundant forward and shadow, Oobleck's re-split and stalls."""

import json

import pytest

from conftest import FIXED_KERNELS, MICRO, compose_cfg, losses_by_step, read_jsonl
from mecefo_exp.methods.bamboo import FORWARD
from mecefo_exp.plan import NORMAL
from mecefo_exp.timing.clock import CostModel
from mecefo_exp.timing.profile import Profile

FWD, NORM, OPT = FIXED_KERNELS["mb:forward"], FIXED_KERNELS["mb:normal"], FIXED_KERNELS["optimizer"]


def _costs(profile_path, summary, n_workers=4):
    """The cost model the run used (same profile, cluster constants and parameter count)."""
    cfg = compose_cfg(MICRO + [f"cluster.n_workers={n_workers}"])
    kernels = json.loads(open(profile_path).read())["kernels"]
    return CostModel(
        Profile(kernels),
        cfg.cluster,
        cfg.hardware,
        summary["n_params"],
        state_bytes=12 * summary["n_params"],
        modes={"normal": NORMAL, "forward": FORWARD},
        max_steps=cfg.trainer.max_steps,
    )


@pytest.fixture(scope="module")
def free(tmp_path_factory):
    """The failure-free reference: checkpoint-restart, failure=none, the fixed profile (run once)."""
    from mecefo_exp.config import validate
    from mecefo_exp.run.experiment import Experiment

    root = tmp_path_factory.mktemp("free")
    prof = root / "fixed_profile.json"
    prof.write_text(json.dumps({"kernels": FIXED_KERNELS, "meta": {"fixed": True}}))
    cfg = compose_cfg(MICRO + ["method=checkpoint", "failure=none", f"cluster.profile={prof}"])
    validate(cfg)
    summary = Experiment(cfg, root / "run").run()
    return summary, root / "run"


def _trace(tmp_path, name, text):
    path = tmp_path / name
    path.write_text("time,worker,event\n" + text)
    return f"failure.path={path}"


def _committed_rows(run_dir):
    """The metrics row of each committed step (the last execution of a replayed step)."""
    rows = {}
    for r in read_jsonl(run_dir / "metrics.jsonl"):
        rows[r["step"]] = r
    return [rows[s] for s in sorted(rows)]


@pytest.mark.parametrize("method, event", [("bamboo", "neighbor"), ("oobleck", "reconfigure")])
def test_failure_high_reproduces_failure_free_losses_bit_for_bit(run_exp, fixed_profile, free, method, event):
    prof_path = fixed_profile()
    free, free_dir = free
    hit, hit_dir = run_exp(f"method={method}", "failure=high", f"cluster.profile={prof_path}", "seed=0")
    kinds = [e["kind"] for e in read_jsonl(hit_dir / "events.jsonl")]
    assert hit["failures"] >= 1 and kinds.count("fail") == hit["failures"] and event in kinds
    assert hit["degraded_steps"] >= 1
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)  # every committed step, exact floats
    assert hit["final_val_loss"] == free["final_val_loss"]
    assert hit["sim_time_s"] > free["sim_time_s"]
    if method == "oobleck" and hit["rollbacks"] == 0:  # the stall defaults to cluster.reconfigure_s
        costs = _costs(prof_path, hit)
        assert hit["time_breakdown"]["stall"] == pytest.approx(
            hit["reconfigurations"] * costs.stall_s(costs.cfg.reconfigure_s)
        )


def test_bamboo_pays_exactly_one_redundant_forward_per_failure_free_step(run_exp, fixed_profile, free):
    prof = f"cluster.profile={fixed_profile()}"
    base, base_dir = free
    eager, eager_dir = run_exp("method=bamboo", "failure=none", prof)
    lazy, lazy_dir = run_exp("method=bamboo", "method.mode=lazy", "failure=none", prof)
    for b, e, z in zip(*(read_jsonl(d / "metrics.jsonl") for d in (base_dir, eager_dir, lazy_dir))):
        assert e["step_cost_s"] == pytest.approx(b["step_cost_s"] + FWD, rel=1e-12)
        assert z["step_cost_s"] == b["step_cost_s"]
    steps = base["steps"]
    assert eager["sim_time_s"] == pytest.approx(base["sim_time_s"] + steps * FWD, rel=1e-12)
    assert eager["time_breakdown"]["ft_overhead"] == pytest.approx(base["time_breakdown"]["ft_overhead"] + steps * FWD)
    assert lazy["sim_time_s"] == base["sim_time_s"]
    assert losses_by_step(eager_dir) == losses_by_step(base_dir) == losses_by_step(lazy_dir)


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_bamboo_shadow_finishes_the_interrupted_step_and_covers_until_rejoin(
    run_exp, fixed_profile, free, tmp_path, mode
):
    prof_path = fixed_profile()
    trace = _trace(tmp_path, "one.csv", "3.5,1,fail\n8,1,recover\n")
    free, free_dir = free
    hit, hit_dir = run_exp(
        "method=bamboo",
        f"method.mode={mode}",
        "failure=trace",
        "failure.unit=steps",
        trace,
        f"cluster.profile={prof_path}",
    )
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)
    assert hit["interrupted_steps"] == 1 and hit["survived_interruptions"] == 1
    assert hit["rollbacks"] == 0 and hit["lost_steps"] == 0 and hit["time_breakdown"]["lost_work"] == 0
    events = read_jsonl(hit_dir / "events.jsonl")
    neighbor = next(e for e in events if e["kind"] == "neighbor")
    assert neighbor["worker"] == 1 and neighbor["detail"]["neighbor"] == 2
    rebalance = next(e for e in events if e["kind"] == "rebalance")
    assert rebalance["worker"] == 1 and rebalance["detail"]["reason"] == "rejoin"
    assert hit["time_breakdown"]["stall"] == pytest.approx(rebalance["detail"]["stall_s"])

    costs = _costs(prof_path, hit)
    redundant = FWD if mode == "eager" else 0.0
    free_step = NORM + redundant + OPT + costs.allreduce_s(4)
    two_mb = 2 * NORM + OPT + costs.allreduce_s(3)  # the shadow: both micro-batches, nothing else
    rows = _committed_rows(hit_dir)
    interrupted = next(r for r in rows if r["degraded"])
    prev = rows[interrupted["step"] - 1]
    # the interrupted step costs, in all, what a degraded step costs: nothing was redone.
    # eager: the shadow had j's forward and adds j's backward; lazy: adds forward + backward
    assert interrupted["sim_time_s"] - prev["sim_time_s"] == pytest.approx(two_mb, rel=1e-9)
    assert two_mb - free_step == pytest.approx(NORM - redundant + costs.allreduce_s(3) - costs.allreduce_s(4))
    for r in rows:
        if r["degraded"] and r is not interrupted:
            assert r["alive"] == 3 and r["step_cost_s"] == pytest.approx(two_mb, rel=1e-12)
        elif not r["degraded"]:
            assert r["alive"] == 4 and r["step_cost_s"] == pytest.approx(free_step, rel=1e-12)


def test_bamboo_adjacent_failures_are_fatal_and_roll_back(run_exp, fixed_profile, free, tmp_path):
    prof = f"cluster.profile={fixed_profile()}"
    trace = _trace(tmp_path, "adjacent.csv", "3.2,1,fail\n3.6,2,fail\n6,1,recover\n6.5,2,recover\n")
    free, free_dir = free
    hit, hit_dir = run_exp(
        "method=bamboo", "failure=trace", "failure.unit=steps", trace, prof, "method.checkpoint_interval=2"
    )
    events = read_jsonl(hit_dir / "events.jsonl")
    kinds = [e["kind"] for e in events]
    assert kinds.index("neighbor") < kinds.index("fatal") < kinds.index("rollback") < kinds.index("restart")
    fatal = next(e for e in events if e["kind"] == "fatal")
    assert fatal["worker"] == 2 and fatal["detail"]["down"] == [1, 2]
    assert fatal["detail"]["reason"] == "adjacent failures"
    assert hit["fatal"] == 1 and hit["rollbacks"] == 1 and hit["status"] == "ok"
    assert hit["time_breakdown"]["lost_work"] > 0 and hit["time_breakdown"]["stall"] > 0
    assert "rebalance" not in kinds  # spares replaced both workers: their recoveries change nothing
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)


def test_bamboo_rebalance_restores_redundancy(run_exp, fixed_profile, free, tmp_path):
    """After a timed rebalance the former shadow may fail too: its successor takes over."""
    prof_path = fixed_profile()
    trace = _trace(tmp_path, "two.csv", "3.5,1,fail\n6.5,2,fail\n")
    free, free_dir = free
    hit, hit_dir = run_exp(
        "method=bamboo",
        "method.rebalance_after_s=0",
        "failure=trace",
        "failure.unit=steps",
        trace,
        f"cluster.profile={prof_path}",
    )
    events = read_jsonl(hit_dir / "events.jsonl")
    assert hit["fatal"] == 0 and hit["rollbacks"] == 0 and hit["rebalances"] == 2
    rebalances = [e["detail"] for e in events if e["kind"] == "rebalance"]
    assert [r["reason"] for r in rebalances] == ["timer", "timer"]
    assert rebalances[0]["left_out"] == [1] and rebalances[0]["extra"] == {"2": [1]}  # the ring 0, 2, 3
    assert rebalances[1]["left_out"] == [1, 2] and rebalances[1]["extra"] == {"3": [1], "0": [2]}  # 0, 3
    neighbors = [
        (e["worker"], e["detail"]["neighbor"], e["detail"]["owners"]) for e in events if e["kind"] == "neighbor"
    ]
    assert neighbors == [(1, 2, [1]), (2, 3, [2, 1])]
    costs = _costs(prof_path, hit)
    rows = _committed_rows(hit_dir)
    # the step worker 2 failed in (after the first rebalance's stall): worker 3 finished it with three micro-batches
    three = rows[next(e["step"] for e in events if e["kind"] == "fail" and e["worker"] == 2)]
    assert three["sim_time_s"] - rows[three["step"] - 1]["sim_time_s"] == pytest.approx(
        rebalances[0]["stall_s"] + 3 * NORM + OPT + costs.allreduce_s(2), rel=1e-9
    )
    # then two workers, two micro-batches each, each also shadowing the other's two forwards
    assert rows[-1]["step_cost_s"] == pytest.approx(2 * NORM + 2 * FWD + OPT + costs.allreduce_s(2), rel=1e-12)
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)


def test_oobleck_degraded_steps_cost_n_over_alive_micro_batches(run_exp, fixed_profile, free, tmp_path):
    prof_path = fixed_profile()
    # three of four workers go down one after another, then the last one: nobody is alive
    # (times in failure-free steps; a degraded step takes about 2, with one worker alive about 4)
    trace = _trace(tmp_path, "oob.csv", "1.5,1,fail\n6,2,fail\n10,3,fail\n20,0,fail\n25,1,recover\n")
    free, free_dir = free
    hit, hit_dir = run_exp(
        "method=oobleck",
        "method.reconfigure_s=10",
        "failure=trace",
        "failure.unit=steps",
        trace,
        f"cluster.profile={prof_path}",
        "method.checkpoint_interval=3",
    )
    costs = _costs(prof_path, hit)
    degraded = [r for r in read_jsonl(hit_dir / "metrics.jsonl") if r["degraded"]]
    assert {r["alive"] for r in degraded} == {3, 2, 1}
    normal, opt = costs.profile["mb:normal"], costs.profile["optimizer"]
    for r in degraded:  # the global batch spread evenly: n / alive micro-batches' worth each
        want = normal * 4 / r["alive"] + opt + costs.allreduce_s(r["alive"])
        assert r["step_cost_s"] == pytest.approx(want, rel=1e-12), r
    events = read_jsonl(hit_dir / "events.jsonl")
    reconf = [e for e in events if e["kind"] == "reconfigure"]
    assert [e["detail"]["alive"] for e in reconf] == [3, 2, 1]  # the recovery of a replaced worker changes nothing
    assert hit["reconfigurations"] == 3 and hit["fatal"] == 1 and hit["rollbacks"] == 1
    fatal = next(e for e in events if e["kind"] == "fatal")
    assert fatal["worker"] == 0 and fatal["detail"]["down"] == [0, 1, 2, 3]
    restart_s = costs.stall_s(costs.cfg.detection_s + costs.cfg.restart_s) + costs.storage_read_s()
    stalls = sum(e["detail"]["stall_s"] for e in reconf)
    assert stalls == pytest.approx(3 * costs.stall_s(10.0))
    assert hit["time_breakdown"]["stall"] == pytest.approx(stalls + restart_s)
    assert hit["time_breakdown"]["lost_work"] > 0 and hit["time_breakdown"]["degraded_extra"] > 0
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)


@pytest.mark.parametrize(
    "method, kind, count", [("bamboo", "rebalance", "rebalances"), ("oobleck", "reconfigure", "reconfigurations")]
)
def test_workers_back_at_one_instant_rejoin_in_one_reconfiguration(
    run_exp, fixed_profile, tmp_path, method, kind, count
):
    """Workers 0 and 2 (not ring neighbours) fail at different steps and come back together (a
    repair tick): one rebalance (Bamboo) or one reconfiguration (Oobleck) takes both back, with
    one stall, not one per worker."""
    trace = _trace(tmp_path, "tick.csv", "1.5,0,fail\n3.5,2,fail\n6,0,recover\n6,2,recover\n")
    hit, hit_dir = run_exp(
        f"method={method}", "failure=trace", "failure.unit=steps", trace, f"cluster.profile={fixed_profile()}"
    )
    back = [
        e
        for e in read_jsonl(hit_dir / "events.jsonl")
        if e["kind"] == kind and e["detail"].get("reason") in ("rejoin", "recover")
    ]
    assert hit["fatal"] == 0 and len(back) == 1 and back[0]["worker"] == 0
    assert hit[count] == (1 if method == "bamboo" else 3)  # Oobleck also re-forms at each failure
