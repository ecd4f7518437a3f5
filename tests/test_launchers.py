"""Sweeps: one folder per job (seed in the name); the SLURM launcher config works locally."""

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import MICRO, ROOT

FAST = [o for o in MICRO if not o.startswith("trainer.max_steps")] + ["trainer.max_steps=4", "trainer.eval_every=0"]


def _summaries(folder):
    return sorted(folder.rglob("summary.json"))


@pytest.mark.slow  # a two-job sweep through run.py (~15 s): `make test-cli`
def test_multirun_gives_each_job_its_own_folder_named_with_its_seed(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            "-m",
            *FAST,
            "method=checkpoint",
            "failure=none",
            "seed=0,1",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    jobs = sorted(p.parent.name for p in _summaries(tmp_path / "sweep"))
    assert len(jobs) == 2 and jobs[0].startswith("0_seed=0") and jobs[1].startswith("1_seed=1")
    for p in _summaries(tmp_path / "sweep"):
        assert json.loads(p.read_text())["status"] == "ok"
    # each job's console lines say which job they come from
    console = out.stdout + out.stderr
    assert "[job 0] " in console and "[job 1] " in console, console[-2000:]
    # the Hydra callback collected the sweep at its end
    assert (tmp_path / "sweep" / "analysis" / "runs.csv").exists()


@pytest.mark.slow  # ~15 s: submitit starts a local job per sweep point
@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
    reason="hydra-submitit-launcher not installed",
)
def test_slurm_launcher_config_runs_through_submitit_locally(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            "-m",
            "hydra/launcher=slurm_local",
            *FAST,
            "method=checkpoint",
            "failure=none",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summaries = _summaries(tmp_path / "sweep")
    assert len(summaries) == 1 and json.loads(summaries[0].read_text())["status"] == "ok"


def test_the_cell_sweeper_composes_one_job_per_new_override_before_launching():
    from hydra_plugins.mecefo_sweeper.cell_sweeper import representatives

    jobs = [
        [f"model={m}", f"method={k}", f"failure={f}"]
        for m in ("a", "b")
        for k in ("x", "y", "z")
        for f in ("none", "high")
    ]
    picked = representatives(jobs)
    assert {o for job in picked for o in job} == {o for job in jobs for o in job}  # every key=value is checked
    assert len(picked) == 5 and picked[0] == jobs[0]  # 12 jobs, 7 values: 5 compositions


@pytest.mark.slow  # two sweeps in subprocesses (~20 s)
def test_a_sweep_into_a_folder_holding_an_earlier_sweeps_jobs_is_refused_in_one_line(tmp_path):
    """A second sweep into a used folder used to append to the first one's job files (its steps
    twice over, an ok record); it is refused, saying how to finish a stopped job, and touches nothing."""
    cmd = [
        sys.executable,
        "run.py",
        "-m",
        *FAST,
        "method=checkpoint",
        "failure=none",
        f"hydra.sweep.dir={tmp_path}/sweep",
    ]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    (job,) = [p.parent for p in _summaries(tmp_path / "sweep")]
    before = (job / "metrics.jsonl").read_text()
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in again.stderr.splitlines() if ln.strip()]
    assert again.returncode == 2 and len(lines) == 1, again.stderr[-2000:]
    assert "holds 1 job(s) of an earlier sweep" in lines[0] and "every one of them finished" in lines[0], lines[0]
    assert (job / "metrics.jsonl").read_text() == before
    # its command (this sweep into a new folder) runs as printed (the hint once did not)
    printed = lines[0].split("sweep into a new folder instead:  ", 1)[1]
    third = subprocess.run(["bash", "-c", printed], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]
    (fresh,) = [p for p in tmp_path.iterdir() if p.name.startswith("sweep_")]
    assert [json.loads(s.read_text())["status"] for s in _summaries(fresh)] == ["ok"]
