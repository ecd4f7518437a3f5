"""Checkpoint-restart: real checkpoints, real rollbacks, the failure-free loss curve bit for bit."""

import json

from conftest import losses_by_step, read_jsonl


def test_failure_high_reproduces_failure_free_losses_bit_for_bit(run_exp, fixed_profile):
    prof = f"cluster.profile={fixed_profile()}"
    free, free_dir = run_exp("method=checkpoint", "failure=none", prof)
    hit, hit_dir = run_exp("method=checkpoint", "failure=high", prof, "method.checkpoint_interval=3", "seed=0")
    events = read_jsonl(hit_dir / "events.jsonl")
    kinds = [e["kind"] for e in events]
    assert hit["failures"] >= 1 and kinds.count("rollback") == hit["failures"]
    assert "restart" in kinds and "checkpoint" in kinds
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)  # every committed step, exact floats
    assert hit["final_val_loss"] == free["final_val_loss"]
    assert hit["sim_time_s"] > free["sim_time_s"]
    assert hit["time_breakdown"]["stall"] > 0 and hit["time_breakdown"]["lost_work"] > 0
    # the checkpoint files are real and hold the state of their step
    ckpts = sorted((hit_dir / "checkpoints").glob("step_*.pt"))
    assert ckpts and len(ckpts) <= 2


def test_rolled_back_steps_are_replayed_with_the_same_samples(run_exp, fixed_profile):
    _, run_dir = run_exp(
        "method=checkpoint", "failure=high", f"cluster.profile={fixed_profile()}", "method.checkpoint_interval=4"
    )
    rows = read_jsonl(run_dir / "metrics.jsonl")
    first = {}
    for r in rows:  # a replayed step has the same loss as its first execution
        if r["step"] in first:
            assert r["loss"] == first[r["step"]]
        first.setdefault(r["step"], r["loss"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(rows) == 12 + summary["lost_steps"]
