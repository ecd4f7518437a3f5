"""A run leaves the record DESIGN.md promises, reproducibly; failed runs say so."""

import json
import math

import pytest

from conftest import losses_by_step, read_jsonl

METRIC_FIELDS = {"step", "tokens", "loss", "lr", "sim_time_s", "wall_time_s", "alive", "degraded"}
EVAL_FIELDS = {"step", "sim_time_s", "tokens", "val_loss", "val_ppl"}
EVENT_FIELDS = {"sim_time_s", "step", "kind", "worker", "detail"}
SUMMARY_FIELDS = {
    "status",
    "method",
    "failure",
    "model",
    "seed",
    "n_workers",
    "steps",
    "tokens_processed",
    "tokens_committed",
    "sim_time_s",
    "wall_time_s",
    "throughput_tok_s",
    "final_val_loss",
    "final_val_ppl",
    "failures",
    "rollbacks",
    "lost_steps",
    "time_breakdown",
    "git_sha",
}
BREAKDOWN = {"compute", "comm", "ft_overhead", "lost_work", "stall", "degraded_extra"}


def test_failure_free_run_leaves_the_contract_records(run_exp, fixed_profile):
    summary, run_dir = run_exp("method=checkpoint", "failure=none", f"cluster.profile={fixed_profile()}")
    for name in ("metrics.jsonl", "eval.jsonl", "events.jsonl", "trace.csv", "profile.json", "summary.json"):
        assert (run_dir / name).exists(), name
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in metrics] == list(range(12))
    assert all(METRIC_FIELDS <= set(r) for r in metrics)
    assert metrics[-1]["tokens"] == 12 * 4 * 2 * 32
    sims = [r["sim_time_s"] for r in metrics]
    assert all(b > a for a, b in zip(sims, sims[1:]))
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert [e["step"] for e in evals] == [6, 12] and all(EVAL_FIELDS <= set(e) for e in evals)
    assert all(EVENT_FIELDS <= set(e) for e in read_jsonl(run_dir / "events.jsonl"))
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert SUMMARY_FIELDS <= set(on_disk) and on_disk["status"] == "ok"
    assert set(on_disk["time_breakdown"]) == BREAKDOWN
    assert on_disk["steps"] == 12 and on_disk["failures"] == 0
    assert on_disk["final_val_ppl"] == pytest.approx(math.exp(on_disk["final_val_loss"]))
    assert on_disk["throughput_tok_s"] == pytest.approx(on_disk["tokens_committed"] / on_disk["sim_time_s"])
    assert sum(on_disk["time_breakdown"].values()) == pytest.approx(on_disk["sim_time_s"])
    assert metrics[-1]["loss"] < metrics[0]["loss"] - 0.1  # it learns


def test_same_seed_same_losses_other_seed_other_losses(run_exp, fixed_profile):
    prof = f"cluster.profile={fixed_profile()}"
    _, a = run_exp("method=checkpoint", "failure=none", prof)
    _, b = run_exp("method=checkpoint", "failure=none", prof)
    _, c = run_exp("method=checkpoint", "failure=none", prof, "seed=1")
    assert losses_by_step(a) == losses_by_step(b)
    assert losses_by_step(a) != losses_by_step(c)


def test_a_failing_run_is_marked_failed(run_exp, fixed_profile, tmp_path, monkeypatch):
    from mecefo_exp.numerics.executor import LocalCluster

    execute = LocalCluster.execute

    def broken_at_step_5(self, plan):
        if plan.step == 5:
            raise RuntimeError("simulated crash in step 5")
        return execute(self, plan)

    monkeypatch.setattr(LocalCluster, "execute", broken_at_step_5)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_exp("method=checkpoint", "failure=none", f"cluster.profile={fixed_profile()}")
    summary = json.loads((tmp_path / "run1" / "summary.json").read_text())
    assert summary["status"] == "failed" and "simulated crash in step 5" in summary["error"]
    assert summary["steps"] == 5  # how far it got


def test_a_torn_last_line_from_a_killed_run_is_dropped(tmp_path):
    from mecefo_exp.metrics import RunRecords

    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "lo')
    records = RunRecords(tmp_path)
    records.metric({"step": 1, "loss": 0.5})
    records.close()
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 0, "loss": 1.0}, {"step": 1, "loss": 0.5}]
