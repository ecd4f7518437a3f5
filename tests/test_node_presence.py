"""A node trace that removes every node: nothing trains until a node is added, on any method, and
the end-of-run invariants (no worker computes while absent; credited work never exceeds the
ideal) fail a run that breaks them instead of recording it.

The trace: 4 nodes at t=0 (usable after 1 s), removed at 10, 12, 14 and 16 s; node5 added at
30 s (usable at 31 s); the last row, at 80 s, is the hard stop. A step is 100 samples; the table
gives 10 samples/s a node.
"""

import json

import pytest
from helpers.settings import NODE_TRACE_ON_A_TABLE

from conftest import compose_cfg

TABLE = "{4: 40, 3: 30, 2: 20, 1: 10}"
COMMON = [*NODE_TRACE_ON_A_TABLE, "cluster.restart_s=1", "cluster.reconfigure_s=1"]
METHODS = ["mecefo", "oobleck", "jit", "reft", "checkpoint", "baft"]
GONE_S, BACK_S = 16.0, 31.0  # every node gone; the added node usable


@pytest.fixture
def all_removed(tmp_path):
    rows = [(0, "add", f"node{i}") for i in range(1, 5)]
    rows += [(10000 + 2000 * i, "remove", f"node{i + 1}") for i in range(4)]
    rows += [(30000, "add", "node5"), (80000, "add", "node6")]
    path = tmp_path / "nodes.csv"
    path.write_text("".join(f"{t},{verb},{name}\n" for t, verb, name in rows))
    return path


def run(tmp_path, trace, *overrides):
    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(COMMON + [f"failure.path={trace}", f"+hardware.tables.default={TABLE}", *overrides])
    return Experiment(cfg, tmp_path / "run").run(), tmp_path / "run"


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("method", METHODS)
def test_no_node_no_training(tmp_path, all_removed, method):
    summary, run_dir = run(tmp_path, all_removed, f"method={method}")
    assert summary["status"] == "ok"
    for row in rows(run_dir):
        start = row["sim_time_s"] - row["step_cost_s"] * (row["step"] - row.get("first_step", row["step"]) + 1)
        # no step runs while no node is there: each ends before the last removal or starts after the add
        assert row["sim_time_s"] <= GONE_S + 1e-9 or start >= BACK_S - 1e-9, row
        if start >= BACK_S - 1e-9:
            assert row["alive"] == 1, row  # one node is back, not the four slots
    window = summary["window"]
    assert window["goodput_over_ideal"] is not None and window["goodput_over_ideal"] <= 1.0 + 1e-9
    # the node added after every node was gone trains: the run did not stop at the empty cluster
    assert any(row["sim_time_s"] > BACK_S for row in rows(run_dir)), method


def test_reft_without_a_node_starts_from_disk(tmp_path, all_removed):
    summary, run_dir = run(tmp_path, all_removed, "method=reft")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    fatal = [e for e in events if e["kind"] == "fatal"]
    assert fatal and "no node is left" in fatal[-1]["detail"]["reason"]
    # the snapshot died with the nodes: the restart on the added node reads the disk checkpoint
    restarts = [e for e in events if e["kind"] == "restart" and e["sim_time_s"] >= BACK_S]
    assert restarts and restarts[0]["detail"].get("source") != "memory"


def test_a_method_on_absent_nodes_fails_the_run(tmp_path, all_removed, monkeypatch):
    """The invariant, not the methods, is what is checked: a method that plans every slot while the
    trace has removed nodes ends `failed`, and its record says why."""
    from mecefo_exp.methods.oobleck import Oobleck
    from mecefo_exp.plan import FailureFreePlan
    from mecefo_exp.run.invariants import InvariantBroken

    monkeypatch.setattr(Oobleck, "plan", lambda self, step: FailureFreePlan(step, self.n))
    with pytest.raises(InvariantBroken, match="4 workers compute but the node trace has 0 nodes present"):
        run(tmp_path, all_removed, "method=oobleck")
    record = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert record["status"] == "failed" and "InvariantBroken" in record["error"]


def test_goodput_above_one_is_refused():
    from mecefo_exp.replay.window_metric import check_goodput
    from mecefo_exp.run.invariants import InvariantBroken

    check_goodput({"goodput_over_ideal": 1.00001, "ideal_samples": 1e5, "credited_samples": 100001})
    with pytest.raises(InvariantBroken, match="goodput over ideal is 11.75"):
        check_goodput({"goodput_over_ideal": 11.75, "ideal_samples": 100.0, "credited_samples": 1175})
    with pytest.raises(InvariantBroken, match="no node could train"):
        check_goodput({"goodput_over_ideal": None, "ideal_samples": 0.0, "credited_samples": 100})


def test_ideal_of_an_empty_cluster_is_zero(tmp_path, all_removed):
    """The ideal integrates nothing while no node is present (a table's nearest entry is not a node)."""
    summary, _ = run(tmp_path, all_removed, "method=oobleck")
    w = summary["window"]
    # ideal: 40/s on [start, 10] + 30/s on [10, 12] + 20/s on [12, 14] + 10/s on [14, 16] + 0 on [16, 31]
    # + 10/s from 31 on: the empty stretch adds nothing
    start, end = w["train_start_s"], w["last_step_end_s"]
    expected = 40 * (10 - start) + 30 * 2 + 20 * 2 + 10 * 2 + 10 * (end - 31)
    assert w["ideal_samples"] == pytest.approx(expected)


@pytest.mark.parametrize("method", METHODS)
def test_a_job_that_starts_with_empty_slots_computes_on_the_nodes_there(tmp_path, method):
    """One node of four slots at the start, each replaced at the instant it is removed, two gaps:
    no method computes on the empty slots from the first step on (MeCeFO planned all four until its
    first membership event; the invariant ends such a run failed)."""
    path = tmp_path / "near.csv"
    path.write_text(
        "0,add,node1\n5000,remove,node1\n5000,add,node2\n9000,remove,node2\n20000,add,node3\n"
        "20000,remove,node3\n25000,add,node4\n60000,add,node5\n"
    )
    summary, run_dir = run(tmp_path, path, f"method={method}")
    assert summary["status"] == "ok" and summary["steps"] > 0
    assert all(row["alive"] <= 1 for row in rows(run_dir))
