"""Sweeps (-m): every valid job runs, the failed ones are listed at the end, the end-of-sweep
collection still runs, and the command exits non-zero; a stopped sweep leaves no job behind.

In a multirun, `job.main` turns a job's failure (a config error, a crash) into a logged line
and returns, so Hydra's launcher goes on to the next job; the job's summary.json already says
`failed` and why. This callback (conf/config.yaml, hydra.callbacks) runs in the launching
process, whichever launcher ran the jobs (joblib's workers are other processes, so the
records are the one place all jobs share):

- at the start it takes the sweep folder's lock (a second sweep into a busy folder is refused
  in one line, exit 2), refuses a folder that holds an earlier sweep's jobs (its jobs would
  append to their files: one line, exit 2, saying how to finish a stopped sweep) and notes the
  jobs the sweeper will launch;
- at the end it lists this sweep's failed jobs (`FAILED`; the entry point exits 1);
- SIGTERM, SIGHUP or Ctrl-C to the launching process stop the sweep: `command.entry` then calls
  `stopped`, which marks every job that did not finish (a job whose process is gone is
  recorded `failed`, with why; a job never started is listed by its overrides) and the entry
  point exits 128 + the signal. joblib kills its worker processes when the launch is
  interrupted; the basic launcher's job records its own stop, then the sweep stops.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .. import runlock
from ..metrics import write_json_atomic
from ..signals import Terminated

log = logging.getLogger(__name__)

#: "folder: error" of every failed job of the sweeps that ended in this process; the entry
#: point exits non-zero when it is not empty
FAILED: List[str] = []


class SweepInProgress:
    """The sweep this process launches: its folder, start time and planned jobs (overrides)."""

    def __init__(self) -> None:
        self.folder: Optional[Path] = None
        self.started = 0.0
        self.planned: Optional[List[List[str]]] = None  # None: the sweeper's plan is not known


CURRENT = SweepInProgress()


def plan(jobs: Sequence[Sequence[str]]) -> None:
    """The sweeper's jobs in job-number order (a sweeper that expands its own design says it)."""
    CURRENT.planned = [list(job) for job in jobs]


def basic_plan(config: DictConfig) -> Optional[List[List[str]]]:
    """The jobs Hydra's basic sweeper makes of `hydra.sweeper.params` and the command line."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        params = OmegaConf.select(config, "hydra.sweeper.params") or {}
        arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
        batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)
    except Exception as e:  # an unusual sweep syntax: the end report lists the folders it finds
        log.debug("sweep plan unknown: %s", e)
        return None
    return [list(job) for batch in batches for job in batch]


def job_folders(sweep_dir: Path, since: float = 0.0) -> Dict[int, Path]:
    """{job number: folder} of the job folders under `sweep_dir` written since `since`."""
    found = {}
    for job in Path(sweep_dir).iterdir():
        number = job.name.split("_", 1)[0]
        if job.is_dir() and (job / ".hydra").is_dir() and number.isdigit() and job.stat().st_mtime >= since:
            found[int(number)] = job
    return found


def failed_jobs(sweep_dir: Path, since: float = 0.0, planned: Optional[int] = None) -> List[str]:
    """'folder: error' for each job folder under `sweep_dir` written since `since` (a Unix
    time; with `planned`, only job numbers below it: this sweep's own) whose summary.json is
    not ok, or that has none."""
    failed = []
    for number, job in sorted(job_folders(sweep_dir, since).items()):
        if planned is not None and number >= planned:
            continue
        try:
            record = json.loads((job / "summary.json").read_text())
        except (OSError, ValueError) as e:
            failed.append(f"{job}: no readable summary.json ({type(e).__name__})")
            continue
        if record.get("status") != "ok":
            failed.append(f"{job}: {record.get('status')}: {record.get('error') or 'no reason recorded'}")
    return failed


def stopped(reason: str) -> Optional[List[str]]:
    """After the launching process was stopped: record every job of the sweep that did not
    finish and return one line per such job (never started ones by their overrides); None
    when no sweep had started."""
    if CURRENT.folder is None or not CURRENT.folder.is_dir():
        return None
    lines = []
    folders = job_folders(CURRENT.folder, CURRENT.started)
    numbers = range(len(CURRENT.planned)) if CURRENT.planned is not None else sorted(folders)
    for number in numbers:
        job = folders.get(number)
        if job is None:  # a planned job (without a plan, the numbers are the folders found)
            assert CURRENT.planned is not None
            lines.append(f"job {number} never started: {' '.join(CURRENT.planned[number])}")
            continue
        summary_path = job / "summary.json"
        try:
            record = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("status") == "ok":
            continue
        if runlock.busy(job):
            lines.append(f"{job}: still running ({runlock.owner(job)})")
            continue
        if record.get("status") != "failed":  # its process was killed before it could say so
            record.update(status="failed", error=f"the sweep was stopped ({reason}) while this job ran")
            write_json_atomic(summary_path, record)
        lines.append(f"{job}: failed: {record.get('error') or 'no reason recorded'}")
    return lines


class FailedJobsCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(str(config.hydra.sweep.dir)).absolute()
        try:
            runlock.acquire(folder)
        except runlock.RunFolderBusy:
            print(
                f"error: sweep folder {folder} is in use by {runlock.owner(folder)}: wait for that sweep to end "
                "(or stop it), or pick another hydra.sweep.dir",
                file=sys.stderr,
            )
            sys.exit(2)
        earlier = job_folders(folder) if folder.is_dir() else {}
        if earlier:
            runlock.release(folder)
            print(f"error: {used_sweep_folder(folder, earlier)}", file=sys.stderr)
            sys.exit(2)
        CURRENT.folder, CURRENT.started = folder, time.time() - 1.0  # file times can be coarse
        CURRENT.planned = basic_plan(config)
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGTERM, signal.SIGHUP):  # joblib then kills its workers; command.entry records the rest
                signal.signal(s, _stop_the_sweep)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        folder = CURRENT.folder
        if folder is None or not folder.is_dir():
            return
        planned = len(CURRENT.planned) if CURRENT.planned is not None else None
        failed = failed_jobs(folder, since=CURRENT.started, planned=planned)
        FAILED.extend(failed)
        runlock.release(folder)
        if failed:
            log.error("%d job(s) of the sweep failed:\n  %s", len(failed), "\n  ".join(failed))


def used_sweep_folder(folder: Path, earlier: Dict[int, Path]) -> str:
    """The refusal of a sweep into a folder holding an earlier sweep's jobs, in one line that ends
    with a command to run as printed: the resume line of its first unfinished job that can be
    continued, else this sweep's command line into a new folder."""
    from ..console import hydra_quoted, program_name, resume_command, shell_quoted, shown_path
    from ..run.resume import earlier_run

    program = program_name()
    unfinished = []
    for number in sorted(earlier):
        state = earlier_run(earlier[number]) or {"status": "unknown", "resumable": False}
        if state["status"] != "ok":
            unfinished.append((earlier[number], state["resumable"]))
    resumable = [job for job, can in unfinished if can]
    head = (
        f"sweep folder {folder} holds {len(earlier)} job(s) of an earlier sweep ({earlier[min(earlier)].name}, ...): "
        "this sweep's jobs would append to their files"
    )
    if resumable:
        command = resume_command(resumable[0], program)
        if len(unfinished) == 1:
            finish = f"its job that did not finish, with:  {command}"
        else:
            finish = (
                f"{len(unfinished)} jobs did not finish, {len(resumable)} of them can be continued (resume=true, each "
                f"with its own hydra.run.dir), the first with:  {command}"
            )
        return f"{head}; give another hydra.sweep.dir, or finish the earlier sweep: {finish}"
    fresh = shown_path(folder.with_name(f"{folder.name}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"))
    args = [a for a in sys.argv[1:] if not a.startswith("hydra.sweep.dir=")]
    args.append("hydra.sweep.dir=" + (fresh if re.fullmatch(r"[\w@%+:./-]+", fresh) else hydra_quoted(fresh)))
    again = " ".join([program, *(a if shlex.quote(a) == a else shell_quoted(a) for a in args)])
    done = (
        f"{len(unfinished)} of them did not finish and have no checkpoint to continue from"
        if unfinished
        else "every one of them finished"
    )
    return f"{head} ({done}); sweep into a new folder instead:  {again}"


def _stop_the_sweep(signum, frame):
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # a second signal must not interrupt the records
    raise Terminated(signum)
