"""Hostile inputs: what a run folder from elsewhere may contain, and what it may not do."""

import json
import os
import pickle
import subprocess
import sys

from conftest import MICRO, ROOT


class _Marker:
    """Unpickling this writes a file: the proof that loading ran code."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_resuming_a_folder_with_a_planted_pickle_runs_no_code(tmp_path):
    run_dir = tmp_path / "run"
    common = [*MICRO, "method=checkpoint", "failure=none", "method.interval=3", "trainer.max_steps=6",
              f"hydra.run.dir={run_dir}"]
    out = subprocess.run([sys.executable, "run.py", *common], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    marker = tmp_path / "code_ran"
    newest = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    newest.write_bytes(pickle.dumps({"step": _Marker(marker)}))
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "running"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    out = subprocess.run([sys.executable, "run.py", "resume=true", f"hydra.run.dir={run_dir}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert not marker.exists(), "loading the checkpoint ran code from the run folder"
    assert out.returncode != 0 and "Weights only load failed" in out.stderr
