"""A checkpoint whose bytes changed on disk is refused, not trained on: a SHA-256 is written with
each torch.save checkpoint and checked at load; a resume falls back to the next older checkpoint."""

import json
import struct
import zipfile

import pytest

from conftest import MICRO, compose_cfg


def flip_exponent_bits(path):
    """Flip an exponent bit of the first floats of the largest tensor stored in a torch.save zip:
    the file still loads (torch does not check the zip's CRCs), with other numbers in it."""
    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    for i in range(start + 3, start + min(info.file_size, 64), 4):  # the high byte of each float32
        data[i] ^= 0x40
    path.write_bytes(bytes(data))


def test_the_store_refuses_a_checkpoint_whose_bytes_changed(tmp_path):
    import torch

    from mecefo_exp.methods.checkpointing import CheckpointCorrupt, CheckpointStore

    state = {"step": 3, "w": torch.arange(4096, dtype=torch.float32)}
    store = CheckpointStore(tmp_path, lambda harness=False: state)
    store.save(3)
    store.flush()
    assert store.on_disk() == [3]  # the checksum file beside it is no checkpoint
    assert torch.equal(store.load(3)["w"], state["w"])
    flip_exponent_bits(store.path(3))
    assert not torch.equal(torch.load(store.path(3), weights_only=True)["w"], state["w"])  # loads, silently wrong
    with pytest.raises(CheckpointCorrupt, match="checksum mismatch"):
        store.load(3)
    store._delete(3)
    assert list(tmp_path.iterdir()) == []  # the checksum goes with its checkpoint


def test_resume_falls_back_from_a_corrupted_newest_checkpoint(tmp_path, fixed_profile, caplog):
    from mecefo_exp.run.experiment import Experiment

    run_dir = tmp_path / "run"
    common = [
        *MICRO,
        "method=checkpoint",
        "failure=none",
        "method.checkpoint_interval=3",
        "trainer.max_steps=7",
        "method.keep=3",
        "trainer.resume_every=0",
        f"cluster.profile={fixed_profile()}",
    ]
    Experiment(compose_cfg(common), run_dir).run()
    newest = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    assert newest.name == "step_0000006.pt"
    flip_exponent_bits(newest)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "running"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with caplog.at_level("WARNING"):
        summary = Experiment(compose_cfg(common + ["resume=true"]), run_dir).run()
    assert f"{newest} cannot be loaded (checksum mismatch" in caplog.text
    assert summary["status"] == "ok" and summary["resumes"][0]["from_step"] == 3
