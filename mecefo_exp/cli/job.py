"""One run, or one job of a sweep, as Hydra starts it (`main`): its folder and the folder's lock, the
resume of its own config, the config checks, and how it ends (a config error, a failure, a signal,
a full disk: one line here, summary.json and the log file say the rest).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from .. import runlock
from ..api import validate_run
from ..config import typed_config
from ..config.hydra_glue import register_configs, torchrun_restarted
from ..console import install_console, program_name, resume_command
from ..errors import AnticipatedEnd, ConfigError
from ..failures import TraceError
from ..metrics import write_json_atomic
from ..paths import conf_dir
from ..run.resume import RESUME_MAY_CHANGE
from ..signals import Terminated
from .preflight import user_overrides

register_configs()
log = logging.getLogger("run")


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig):
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        return _sweep_job(cfg)
    return _one_run(cfg)


def _sweep_job(cfg: DictConfig):
    """One job of a sweep: its failure is its own (summary.json says failed and why), never
    the sweep's: Hydra goes on to the next job, and sweeps.FailedJobsCallback lists the failed
    ones at the end."""
    try:
        return _one_run(cfg)
    except SystemExit as e:  # a config error or a signal: already said in one line
        if e.code in (0, None):
            return None
        if e.code == 130:  # Ctrl-C stops the sweep, not only this job
            raise KeyboardInterrupt from None
        if e.code in (128 + signal.SIGTERM, 128 + signal.SIGHUP):  # so does a signal to stop
            raise Terminated(e.code - 128) from None
        log.error("job failed (exit %s); the sweep goes on", e.code)
    except Exception as e:  # a crash: the record says failed; the traceback is in this job's run.log
        log.exception("job failed: %s: %s; the sweep goes on", type(e).__name__, e)
    return None


def _one_run(cfg: DictConfig):
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if not writes_record():
        return _job(cfg, run_dir)
    locked = lock_folder(run_dir, cfg)
    try:
        runlock.acquire(locked)  # before anything is written; released when the job ends (a sweep runs many)
    except runlock.RunFolderBusy as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        if HydraConfig.get().mode == RunMode.RUN:  # a folder a config file fixes (entry checked the command line's)
            refuse_a_used_folder(run_dir, cfg)
        return _job(cfg, run_dir)
    finally:
        runlock.release(locked)


def used_folder_problem(run_dir: Path, cfg=None) -> Optional[str]:
    """Why a run that is not a resume cannot start in `run_dir` (None when it can): the folder holds
    a run started there before, whose files the new run would append to (its metrics twice over, an
    `ok` record of neither), in one line naming the folder and what to do instead. A resume, a later
    torchrun round, or the launcher of torchft machine m > 0 (machine 0 writes the run folder) joins
    the run there: not refused."""
    from ..run.resume import earlier_run

    if cfg is not None:
        if cfg.resume or (cfg.cluster.name == "torchft" and cfg.cluster.get("machine_rank", 0) > 0):
            return None
    if torchrun_restarted():
        return None
    earlier = earlier_run(run_dir)
    if earlier is None:
        return None
    head = (
        f"run folder {run_dir} already holds a run (status {earlier['status']}): a new run there would append "
        "to its files"
    )
    elsewhere = "give another hydra.run.dir, or none (every run gets a new folder)"
    if earlier["status"] == "ok":
        return f"{head}; it finished: {elsewhere}"
    if earlier["resumable"]:
        return f"{head}; {elsewhere}, or continue that run with:  {resume_command(run_dir, program=program_name())}"
    return f"{head}; it has no complete checkpoint to continue from: {elsewhere}"


def refuse_a_used_folder(run_dir: Path, cfg) -> None:
    problem = used_folder_problem(run_dir, cfg)
    if problem is None:
        return
    from ..tiers.torchrun_launch import note_config_refused

    note_config_refused(problem)  # torchrun's later rounds end at once instead of resuming the folder
    print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)


def lock_folder(run_dir: Path, cfg) -> Path:
    """The folder whose lock a run takes: its run folder, or for the launcher of torchft machine
    m > 0 (machine 0's launcher owns the run folder) `<run>/torchft/machine-<m>`, so that one
    launcher per machine can run."""
    c = cfg.cluster if cfg is not None else None
    if c is not None and c.name == "torchft" and c.get("machine_rank", 0) > 0:
        return Path(run_dir) / "torchft" / f"machine-{c.machine_rank}"
    return Path(run_dir)


def _job(cfg: DictConfig, run_dir: Path):
    from omegaconf import OmegaConf

    hc = HydraConfig.get()
    if torchrun_restarted():
        cfg.resume = True  # torchrun restarted the group after a failure: continue, don't start over
    try:
        if cfg.resume and (run_dir / "config.yaml").exists():
            given = cfg
            # the run's own config (entry() refused other changes), typed, with keys added since at their defaults
            cfg = typed_config(OmegaConf.load(run_dir / "config.yaml"), str(run_dir / "config.yaml"))
            cfg.resume = True
            typed_keys = {o.lstrip("+~").split("=", 1)[0] for o in user_overrides(list(hc.overrides.task))}
            for key in typed_keys & set(RESUME_MAY_CHANGE):
                OmegaConf.update(cfg, key, OmegaConf.select(given, key))
        validate_run(cfg)
    except ConfigError as e:
        _config_error(run_dir, e)
    install_console(hc)  # sweep jobs' lines start with [job N]
    if cfg.data.name == "local" or cfg.data.path:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if cfg.data.name == "c4":
        from ..data import check_tokenizer  # before any data is read: one line if it cannot be found

        try:
            check_tokenizer(cfg.data)
        except ConfigError as e:
            _config_error(run_dir, e)
    log.info(
        "run folder %s; after a crash or kill -9 continue it with:  %s",
        run_dir,
        resume_command(run_dir, program=program_name()),
    )
    from ..plan import NonFiniteLoss
    from ..run.experiment import Experiment  # torch and transformers load only for a valid config
    from ..timing.clock import ClockOverflow

    # ends a run can meet and its record explains: one line here, the traceback in the run's log file
    anticipated: tuple = (NonFiniteLoss, ClockOverflow, AnticipatedEnd)
    try:
        if cfg.cluster.name == "torchft":  # this process starts and watches one process per worker
            # torch's C++ side logs each failed store read with its C++ frames when a peer dies (read
            # once, at torch's first import; the workers get it too): the Python errors say it in a line
            os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            from ..tiers.torchft.launcher import WorkerFailed, launch

            anticipated += (WorkerFailed,)
            summary = launch(cfg, run_dir)
        else:
            summary = Experiment(cfg, run_dir).run()
    except anticipated as e:
        _traceback_to_log_file(f"{type(e).__name__}: {e}")
        print(
            f"failed: {' '.join(str(e).split())} ({run_dir}; summary.json says failed, the traceback is in its "
            "log file)",
            file=sys.stderr,
        )
        sys.exit(1)
    except (ConfigError, TraceError) as e:  # found once the config was valid (torchft missing, a trace too
        _config_error(run_dir, e)  # large to draw): still one line
    except Terminated as e:  # summary.json already says failed, and why
        print(f"stopped: {e} ({run_dir})", file=sys.stderr)
        sys.exit(128 + e.signum)
    except KeyboardInterrupt:  # Ctrl-C: one line here, the traceback only in the run's log file
        _traceback_to_log_file("stopped by Ctrl-C")
        print(f"stopped: Ctrl-C ({run_dir}; summary.json says failed)", file=sys.stderr)
        sys.exit(130)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        _traceback_to_log_file("no space left on device")
        print(f"stopped: no space left on device ({e}); {run_dir} resumes once there is room", file=sys.stderr)
        sys.exit(1)
    return summary["final_val_ppl"]


def _traceback_to_log_file(what: str) -> None:
    """The current exception's traceback into the run's log file(s), not onto the console."""
    record = logging.LogRecord(__name__, logging.ERROR, __file__, 0, what, None, sys.exc_info())
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _config_error(run_dir: Path, e: ConfigError | TraceError) -> None:
    """One line, before any compute; a new folder says it did not run, a folder that already
    holds a run's record (a refused resume) keeps it as it was."""
    if not (run_dir / "summary.json").exists():
        write_json_atomic(run_dir / "summary.json", {"status": "failed", "error": f"config: {e}"})
    from ..tiers.torchrun_launch import note_config_refused

    note_config_refused(str(e))  # torchrun's later rounds end at once, silent
    print(f"config error: {e}", file=sys.stderr)
    sys.exit(2)


def writes_record() -> bool:
    """Under torchrun only rank 0 writes (and locks) the run folder."""
    return os.environ.get("RANK", "0") == "0"
