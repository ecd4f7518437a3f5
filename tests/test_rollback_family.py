"""The rollback family (checkpoint-restart, REFT, BAFT): exact under failures, only time is lost.

REFT's in-memory snapshot is tested at the unit level (shards, XOR parity, rebuild, too
many erasures) and in runs: a failure restores from memory, two losses in one parity group
fall back to the disk checkpoint.
"""

import io
import json

import numpy as np
import pytest
import torch

from conftest import MICRO, compose_cfg, losses_by_step, read_jsonl
from mecefo_exp.config import validate
from mecefo_exp.methods.parity import (
    ShardedSnapshot,
    SnapshotLedger,
    UnrecoverableSnapshot,
    ledger_index,
    parity_layout,
)
from mecefo_exp.timing.steps import bubble_fraction

# Small intervals so that 12 MICRO steps see several saves. REFT with two parity groups of
# two workers ({0, 1} with its parity on worker 2, {2, 3} with its parity on worker 0).
METHODS = {
    "checkpoint": ["method=checkpoint", "method.checkpoint_interval=3"],
    "reft": ["method=reft", "method.snapshot_every=2", "method.parity_group=2", "method.checkpoint_interval=4"],
    "baft": ["method=baft", "method.checkpoint_interval=3"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run (and remember) MICRO experiments by overrides: the failure-free references are shared."""
    from mecefo_exp.run.experiment import Experiment

    root = tmp_path_factory.mktemp("rollback_family")
    profile = root / "fixed_profile.json"
    from conftest import FIXED_KERNELS

    profile.write_text(json.dumps({"kernels": FIXED_KERNELS, "meta": {"fixed": True}}))
    cache = {}

    def run(*overrides):
        key = tuple(overrides)
        if key not in cache:
            cfg = compose_cfg(MICRO + [f"cluster.profile={profile}", "seed=0"] + list(overrides))
            validate(cfg)
            run_dir = root / f"run{len(cache)}"
            cache[key] = (Experiment(cfg, run_dir).run(), run_dir)
        return cache[key]

    return run


# ------------------------------------------------------------------ every method
@pytest.mark.parametrize("method", list(METHODS))
def test_failures_cost_time_but_not_a_single_bit_of_the_loss_curve(runs, method):
    free, free_dir = runs(*METHODS[method], "failure=none")
    hit, hit_dir = runs(*METHODS[method], "failure=high")
    kinds = [e["kind"] for e in read_jsonl(hit_dir / "events.jsonl")]
    assert hit["failures"] >= 1 and kinds.count("fail") == hit["failures"]
    assert hit["rollbacks"] >= hit["failures"] and kinds.count("rollback") == hit["rollbacks"]
    assert "restart" in kinds
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)  # exact floats, every committed step
    assert hit["final_val_loss"] == free["final_val_loss"]
    assert hit["sim_time_s"] > free["sim_time_s"]
    assert hit["time_breakdown"]["stall"] > 0 and free["time_breakdown"]["stall"] == 0
    assert free["rollbacks"] == 0 and free["failures"] == 0


def test_reft_restores_from_memory_and_charges_the_visible_part_of_each_snapshot(runs):
    free, free_dir = runs(*METHODS["reft"], "failure=none")
    hit, hit_dir = runs(*METHODS["reft"], "failure=high")
    events = read_jsonl(hit_dir / "events.jsonl")
    memory = [e for e in events if e["kind"] == "restart" and e["detail"].get("source") == "memory"]
    assert memory and hit["memory_restores"] == len(memory) >= 1
    for e in memory:  # the failed worker's shard was lost and rebuilt from its group's parity
        assert f"shard {e['worker']}" in e["detail"]["lost"] and e["worker"] in e["detail"]["rebuilt_shards"]
    rollbacks = [e for e in events if e["kind"] == "rollback" and e["detail"]["reason"] == "failure"]
    assert all(e["detail"]["to_step"] % 2 == 0 for e in rollbacks)  # snapshot steps
    assert hit["parity_groups"] == [[0, 1], [2, 3]] and hit["parity_holders"] == [2, 0]
    # failure-free: 7 snapshots (steps 0, 2, ..., 12) at (1 - overlap) * state_copy each, plus disk checkpoints
    snaps = [e for e in read_jsonl(free_dir / "events.jsonl") if e["kind"] == "snapshot"]
    assert [e["detail"]["step"] for e in snaps] == [0, 2, 4, 6, 8, 10, 12]
    assert free["snapshot_charge_s"] == pytest.approx(0.1 * 0.001)
    disk = [e for e in read_jsonl(free_dir / "events.jsonl") if e["kind"] == "checkpoint"]
    assert [e["detail"]["step"] for e in disk] == [0, 4, 8, 12]
    assert free["time_breakdown"]["ft_overhead"] == pytest.approx(
        7 * free["snapshot_charge_s"] + sum(e["detail"]["cost_s"] for e in disk)
    )


def test_baft_hides_checkpoint_writes_in_the_pipeline_bubble(runs):
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert bubble_fraction(1, 8) == 0.0  # no pipeline, no bubble
    baft, baft_dir = runs(*METHODS["baft"], "failure=none")
    ckpt, ckpt_dir = runs(*METHODS["checkpoint"], "failure=none")
    assert baft["bubble_fraction"] == pytest.approx(3 / 11)
    assert baft["checkpoint_charge_s"] == pytest.approx(max(0.0, baft["checkpoint_write_s"] - baft["bubble_s"]))
    saves = [e for e in read_jsonl(baft_dir / "events.jsonl") if e["kind"] == "checkpoint"]
    assert [e["detail"]["step"] for e in saves] == [0, 3, 6, 9, 12]
    assert all(e["detail"]["cost_s"] == baft["checkpoint_charge_s"] for e in saves)
    # the same checkpoints as checkpoint-restart at the same interval, minus what the bubbles hide
    assert baft["time_breakdown"]["ft_overhead"] == pytest.approx(5 * baft["checkpoint_charge_s"])
    assert ckpt["time_breakdown"]["ft_overhead"] == pytest.approx(5 * baft["checkpoint_write_s"])
    assert baft["time_breakdown"]["ft_overhead"] < ckpt["time_breakdown"]["ft_overhead"]
    assert sorted((baft_dir / "checkpoints").glob("step_*.pt"))  # real files


# ------------------------------------------------------------------ REFT, unit level
def _payload(nbytes=10_001, seed=0):
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()


def test_parity_layout_puts_each_groups_parity_outside_the_group():
    assert parity_layout(8, 4) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [4, 0])
    assert parity_layout(5, 2) == ([[0, 1], [2, 3], [4]], [2, 4, 0])
    assert parity_layout(4, 4) == ([[0, 1, 2, 3]], [None])  # one group: a separate holder


def test_a_destroyed_shard_is_rebuilt_byte_identical_from_parity():
    payload = _payload()
    snap = ShardedSnapshot(payload, n_workers=8, group_size=4, step=7)
    assert snap.shard_bytes == 1251 and all(s.size == 1251 for s in snap.shards)  # padded to equal shards
    original = snap.shards[5].tobytes()
    assert snap.lose(5) == ["shard 5"]
    assert snap.shards[5] is None  # really gone
    assert snap.unrecoverable() == {} and snap.erasures() == {1: ["shard 5"]}
    assert snap.rebuild(5).tobytes() == original
    assert snap.payload() == payload
    assert snap.shards[5] is None  # the holder stays empty until the next snapshot
    assert snap.lose(2) == ["shard 2"]  # one erasure in each group is fine
    assert snap.payload() == payload
    # a worker that holds another group's parity loses it too
    snap = ShardedSnapshot(payload, n_workers=8, group_size=4, step=7)
    assert snap.lose(0) == ["shard 0", "parity 1"]
    assert snap.erasures() == {0: ["shard 0"], 1: ["parity 1"]} and snap.payload() == payload


def test_two_losses_in_one_group_are_beyond_xor_parity():
    snap = ShardedSnapshot(_payload(), n_workers=8, group_size=4, step=0)
    snap.lose(1)
    snap.lose(2)
    assert snap.unrecoverable() == {0: ["shard 1", "shard 2"]}
    with pytest.raises(UnrecoverableSnapshot):
        snap.payload()
    with pytest.raises(UnrecoverableSnapshot):
        snap.rebuild(1)
    # a lost shard plus its group's parity (held by worker 4) is two erasures as well
    snap = ShardedSnapshot(_payload(), n_workers=8, group_size=4, step=0)
    snap.lose(3)
    snap.lose(4)
    assert snap.unrecoverable() == {0: ["shard 3", "parity 0"]}


@pytest.mark.parametrize(
    "n, group, chains", [(8, 4, None), (5, 2, None), (4, 4, None), (8, 2, [[0, 2, 4, 6], [1, 3, 5, 7]])]
)
def test_the_numerics_free_ledger_decides_as_the_sharded_snapshot(n, group, chains):
    """Random losses and heals: the ledger (no bytes) reports the same lost blocks, erasures,
    unrecoverable groups and missing shards as the real sharded snapshot at every point, restores
    the same state, and survives its own checkpoint round trip."""
    rng = np.random.default_rng(n * 10 + group)
    state = {"step": 3, "model": {"w": torch.arange(6.0)}}
    buf = io.BytesIO()
    torch.save(state, buf)
    groups, holders = parity_layout(n, group, chains)
    for _ in range(30):
        real = ShardedSnapshot(buf.getvalue(), n, group, 3, chains)
        ledger = SnapshotLedger.of_state(state, n, (groups, holders, ledger_index(groups, holders)))
        for w in rng.permutation(n)[: rng.integers(1, n + 1)]:
            assert ledger.lose(int(w)) == real.lose(int(w))
            assert ledger.erasures() == real.erasures() and ledger.unrecoverable() == real.unrecoverable()
            assert ledger.missing() == real.missing()
            ledger = SnapshotLedger.from_state(ledger.to_state())
            if real.unrecoverable():
                with pytest.raises(UnrecoverableSnapshot):
                    ledger.state()
                break
            assert torch.equal(ledger.state()["model"]["w"], real.state()["model"]["w"])
            if rng.random() < 0.3:
                real.heal()
                ledger.heal()
                assert ledger.erasures() == real.erasures() == {}


def test_a_corrupted_rebuild_is_caught_by_the_digest():
    snap = ShardedSnapshot(_payload(), n_workers=4, group_size=2, step=0)
    snap.shards[1][0] ^= 0xFF  # a survivor's memory was corrupted
    snap.lose(0)
    with pytest.raises(RuntimeError, match="digest"):
        snap.rebuild(0)


def test_a_training_state_survives_the_round_trip_bit_for_bit():
    model = torch.nn.Linear(7, 3)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(5, 7)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 4, "rng": torch.get_rng_state()}
    snap = ShardedSnapshot.of_state(state, n_workers=4, group_size=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():  # the live state moves on; the snapshot must not
        model.weight.add_(1.0)
    snap.lose(2)
    back = snap.state()
    assert back["step"] == 4 and torch.equal(back["rng"], state["rng"])
    for k, v in before.items():
        assert torch.equal(back["model"][k], v)
    buf = io.BytesIO()
    torch.save(back["optimizer"], buf)
    assert back["optimizer"]["state"][0]["exp_avg"].shape == (3, 7)


# ------------------------------------------------------------------ REFT, runs on a written trace
def _trace(tmp_path, rows):
    path = tmp_path / "trace.csv"
    path.write_text("time,worker,event\n" + "".join(f"{t},{w},{k}\n" for t, w, k in rows))
    return ["failure=trace", "failure.unit=steps", f"failure.path={path}"]


def test_two_workers_of_one_group_down_together_fall_back_to_the_disk_checkpoint(runs, tmp_path):
    # worker 0 fails during step 7 (snapshot of step 6 in memory, disk checkpoint of step 4);
    # worker 1, of the same group, fails inside the restart stall, before the spare got its
    # rebuilt shard: two erasures in one group, parity cannot help.
    trace = _trace(tmp_path, [(7.5, 0, "fail"), (7.52, 1, "fail"), (10.0, 0, "recover"), (10.5, 1, "recover")])
    hit, hit_dir = runs(*METHODS["reft"], *trace)
    free, free_dir = runs(*METHODS["reft"], "failure=none")
    events = read_jsonl(hit_dir / "events.jsonl")
    story = [
        (e["kind"], e["worker"], e["detail"].get("to_step"), e["detail"].get("reason"))
        for e in events
        if e["kind"] in ("fail", "rollback", "fatal")
    ]
    assert story == [
        ("fail", 0, None, None),
        ("rollback", 0, 6, "failure"),
        ("fail", 1, None, None),
        ("fatal", 1, None, "more than one erasure in a parity group"),
        ("rollback", 1, 4, "fatal"),
    ]
    fatal = next(e for e in events if e["kind"] == "fatal")
    assert fatal["detail"]["groups"] == {"0": ["shard 0", "shard 1"]}
    assert hit["fatal"] == 1 and hit["memory_restores"] == 1
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)
    assert hit["sim_time_s"] > free["sim_time_s"]


def test_losses_in_different_groups_are_both_rebuilt_from_memory(runs, tmp_path):
    # workers 1 and 3 hold no parity: one erasure in each group, both restores from memory
    trace = _trace(tmp_path, [(7.5, 1, "fail"), (7.9, 3, "fail"), (10.0, 1, "recover"), (10.5, 3, "recover")])
    hit, hit_dir = runs(*METHODS["reft"], *trace)
    free, free_dir = runs(*METHODS["reft"], "failure=none")
    restarts = [e for e in read_jsonl(hit_dir / "events.jsonl") if e["kind"] == "restart"]
    assert [e["detail"]["source"] for e in restarts] == ["memory", "memory"]
    assert restarts[1]["detail"]["rebuilt_shards"] == [3]  # the spare of worker 1 got its shard back
    assert hit["fatal"] == 0 and hit["rollbacks"] == 2
    assert losses_by_step(hit_dir) == losses_by_step(free_dir)
