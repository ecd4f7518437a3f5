"""Sweeps (-m) that survive a bad job: every valid job runs, the failed ones are listed at
the end, the end-of-sweep collection still runs, and the command exits non-zero.

In a multirun, `cli.main` turns a job's failure (a config error, a crash, SIGTERM) into a
logged line and returns, so Hydra's launcher goes on to the next job; the job's
summary.json already says `failed` and why. This callback (conf/config.yaml, hydra.callbacks)
reads the records at the end, in the launching process, whichever launcher ran the jobs
(joblib's workers are other processes, so the records are the one place all jobs share).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, List, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)

#: "folder: error" of every failed job of the sweeps that ended in this process; the entry
#: point exits non-zero when it is not empty
FAILED: List[str] = []


def failed_jobs(sweep_dir: Path, since: float = 0.0) -> List[str]:
    """'folder: error' for each job folder under `sweep_dir` written since `since` (a Unix
    time) whose summary.json is not ok, or that has none."""
    failed = []
    for job in sorted(p for p in Path(sweep_dir).iterdir() if p.is_dir() and (p / ".hydra").is_dir()):
        if job.stat().st_mtime < since:
            continue  # a job of an earlier sweep into the same folder
        summary = job / "summary.json"
        try:
            record = json.loads(summary.read_text())
        except (OSError, ValueError) as e:
            failed.append(f"{job}: no readable summary.json ({type(e).__name__})")
            continue
        if record.get("status") != "ok":
            failed.append(f"{job}: {record.get('status')}: {record.get('error') or 'no reason recorded'}")
    return failed


class FailedJobsCallback(Callback):
    def __init__(self) -> None:
        self._sweep: Optional[Path] = None
        self._started = 0.0

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._sweep = Path(str(config.hydra.sweep.dir)).absolute()
        self._started = time.time() - 1.0  # file times have coarse resolution on some filesystems

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._sweep is None or not self._sweep.is_dir():
            return
        failed = failed_jobs(self._sweep, since=self._started)
        FAILED.extend(failed)
        if failed:
            log.error("%d job(s) of the sweep failed:\n  %s", len(failed), "\n  ".join(failed))
