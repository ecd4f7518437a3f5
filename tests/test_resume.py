"""A killed run is never lost: kill -9 the whole process and resume; kill a torchrun rank."""

import json
import signal
import subprocess
import sys
import time

import pytest
from helpers.processes import rows_so_far
from test_torchrun import TORCHRUN, torchrun

from conftest import MICRO, ROOT, losses_by_step, read_jsonl, run_py


@pytest.mark.slow  # a real kill -9 (~20 s); make test-crash and CI run it
def test_kill_9_the_whole_run_and_resume_to_the_identical_end(run_exp, fixed_profile, tmp_path):
    prof = fixed_profile()
    common = [
        "method=checkpoint",
        "failure=high",
        "method.checkpoint_interval=3",
        "trainer.max_steps=40",
        "trainer.eval_every=10",
        f"cluster.profile={prof}",
    ]
    whole, whole_dir = run_exp(*common)

    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "run.py", *MICRO, *common, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    metrics = run_dir / "metrics.jsonl"
    while time.time() < deadline and proc.poll() is None:
        if len(rows_so_far(metrics)) >= 15:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed: make it longer"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "running"  # not finished, and says so

    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["status"] == "ok"
    assert resumed["final_val_loss"] == whole["final_val_loss"]
    assert losses_by_step(run_dir) == losses_by_step(whole_dir)
    assert resumed["sim_time_s"] == pytest.approx(whole["sim_time_s"], rel=1e-12)  # the books resume too
    assert resumed["failures"] == whole["failures"] and resumed["rollbacks"] == whole["rollbacks"]
    assert any(e["kind"] == "resume" for e in read_jsonl(run_dir / "events.jsonl"))


def test_resume_without_a_checkpoint_is_one_clear_error(tmp_path):
    out, _ = run_py(*MICRO, "method=checkpoint", "resume=true", f"hydra.run.dir={tmp_path}/empty", timeout=180)
    assert out.returncode == 2
    assert out.stderr == f"config error: nothing to resume in {tmp_path}/empty: no such folder\n"


@pytest.mark.slow  # ~60 s: torchrun starts the group twice
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun not installed next to this python")
def test_sigkill_a_rank_torchrun_restarts_and_the_losses_are_failure_free(fixed_profile, tmp_path):
    prof = fixed_profile()
    trace = tmp_path / "kill.csv"
    trace.write_text("time,worker,event\n5.5,1,fail\n9,1,recover\n")
    common = ["method=checkpoint", "method.checkpoint_interval=3", f"cluster.profile={prof}", "trainer.max_steps=14"]
    torchrun(tmp_path / "free", *common, "failure=none")
    simulated = ["failure=trace", "failure.unit=steps", f"failure.path={trace}"]
    torchrun(tmp_path / "sim", *common, *simulated)
    torchrun(tmp_path / "kill", *common, *simulated, "failure.kill=true", extra_args=["--max-restarts=2"])
    kills = (tmp_path / "kill" / "kills.txt").read_text().split()
    assert len(kills) == 1 and kills[0].endswith(":1")
    killed = json.loads((tmp_path / "kill" / "summary.json").read_text())
    sim = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert killed["status"] == "ok"
    assert losses_by_step(tmp_path / "kill") == losses_by_step(tmp_path / "free")  # same tier: bit for bit
    assert killed["final_val_loss"] == sim["final_val_loss"]
    assert killed["sim_time_s"] == pytest.approx(sim["sim_time_s"], rel=1e-12)
    assert any(e["kind"] == "resume" for e in read_jsonl(tmp_path / "kill" / "events.jsonl"))
