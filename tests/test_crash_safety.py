"""Crash safety: SIGKILL each of the six methods at a random committed step, resume, and get
the uninterrupted run: the same losses, clock, counters and summary, and the same metrics,
eval, events and grad_error files once the resume's own event is left out.

The kill step is drawn at random on every run (CRASH_STEP=<k> pins it) and named in any
failure, so a failure can be replayed.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import MICRO, ROOT, VOLATILE_SUMMARY, run_py, run_records


def committed_rows(path):
    """The whole rows of a jsonl file the run is writing (a torn last line is not a row yet)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


pytestmark = pytest.mark.slow

STEPS = 40
# per method: checkpoints often enough that the resume starts mid-run, and the method's own
# state (snapshots, projections, covers, rings) is busy when the kill lands
METHODS = {
    "checkpoint": ["method.checkpoint_interval=3"],
    "reft": ["method.snapshot_every=2", "method.checkpoint_interval=4"],
    "baft": ["method.checkpoint_interval=3"],
    "mecefo": ["method.checkpoint_interval=4", "method.svd_every=100", "method.rank=4", "method.grad_error_every=2"],
    "bamboo": ["method.checkpoint_interval=4", "method.rebalance_after_s=1800"],
    "oobleck": ["method.checkpoint_interval=4"],
}


def _common(method, prof):
    return [
        f"method={method}",
        *METHODS[method],
        "failure=high",
        "seed=3",
        f"trainer.max_steps={STEPS}",
        "trainer.eval_every=10",
        "trainer.threads=1",
        f"cluster.profile={prof}",
    ]


@pytest.fixture
def one_thread_back_to_two():
    yield
    torch.set_num_threads(2)  # conftest's setting; trainer.threads=1 changed it in-process


@pytest.mark.parametrize("method", list(METHODS))
def test_sigkill_at_a_random_step_and_resume_is_the_uninterrupted_run(
    method, run_exp, fixed_profile, tmp_path, one_thread_back_to_two
):
    tag = "[sa=1,rc=1,lr=1,r=4]"  # MeCeFO's kernels, named by its switches
    prof = fixed_profile({f"mb:mecefo{tag}": 0.012, f"neighbor_pair{tag}": 0.016, f"mecefo_svd{tag}": 0.004})
    common = _common(method, prof)
    whole, whole_dir = run_exp(*common)
    assert whole["failures"] > 0, "no failure in the trace: the test would prove little"

    kill_at = int(os.environ.get("CRASH_STEP", random.randrange(4, STEPS - 4)))
    why = f"method={method}, killed after committed step {kill_at} (CRASH_STEP={kill_at} replays this)"
    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "run.py", *MICRO, *common, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    metrics, deadline = run_dir / "metrics.jsonl", time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if any(r.startswith(f'{{"step": {kill_at},') for r in committed_rows(metrics)):
            break
        time.sleep(0.01)
    assert proc.poll() is None, f"{why}: the run ended before the kill ({proc.stderr.read()[-2000:]!r})"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "running", why

    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=300)
    assert out.returncode == 0, f"{why}\n{out.stderr[-3000:]}"
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["status"] == "ok", why
    assert len(resumed["resumes"]) == 1 and resumed["resumes"][0]["from_step"] <= kill_at + 1, why
    assert resumed["final_val_loss"] == whole["final_val_loss"], why
    assert resumed["sim_time_s"] == whole["sim_time_s"], why
    assert resumed["time_breakdown"] == whole["time_breakdown"], why
    strip = lambda s: {k: v for k, v in json.loads(json.dumps(s)).items() if k not in VOLATILE_SUMMARY}  # noqa: E731
    assert strip(resumed) == strip(whole), why  # every counter, the method's own included
    records, expected = run_records(run_dir), run_records(whole_dir)
    for name in expected:
        assert records[name] == expected[name], f"{why}: {name}.jsonl differs"
    assert not list(run_dir.rglob("*.tmp")), why
