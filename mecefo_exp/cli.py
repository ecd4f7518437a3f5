"""The command line: `mecefo-exp ...` (installed console script) == `python run.py ...`.

    mecefo-exp                                      # tiny LLaMA, 8 workers, mecefo, failure=high
    mecefo-exp method=bamboo failure=medium model=llama_60m
    mecefo-exp -m method=checkpoint,mecefo failure=none,high
    mecefo-exp experiment=debug                     # a few tiny steps: does everything work?

Hydra finds its configs in the checkout's conf/ or, for an installed wheel, in the copy
the package carries (mecefo_exp.paths.conf_dir), so the command works from any folder.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import logging
import os
import signal
import sys
from pathlib import Path
from typing import List, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from . import api, runlock
from .api import validate_run
from .config import typed_config
from .console import hydra_quoted, install_console, program_name, resume_command, shell_quoted
from .errors import AnticipatedEnd, ConfigError
from .failures import TraceError
from .hydra_glue import local_settings_problem, register_configs, torchrun_restarted
from .metrics import write_json_atomic
from .paths import conf_dir
from .presets import first_job, unknown_preset
from .run.resume import RESUME_MAY_CHANGE
from .signals import Terminated

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
    if not _writes_record():
        return _job(cfg, run_dir)
    locked = lock_folder(run_dir, cfg)
    try:
        runlock.acquire(locked)  # before anything is written; released when the job ends (a sweep runs many)
    except runlock.RunFolderBusy as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        if HydraConfig.get().mode == RunMode.RUN:  # a folder a config file fixes (entry checked the command line's)
            _refuse_a_used_folder(run_dir, cfg)
        return _job(cfg, run_dir)
    finally:
        runlock.release(locked)


def used_folder_problem(run_dir: Path, cfg=None) -> Optional[str]:
    """Why a run that is not a resume cannot start in `run_dir` (None when it can): the folder holds
    a run started there before, whose files the new run would append to (its metrics twice over, an
    `ok` record of neither), in one line naming the folder and what to do instead. A resume, a later
    torchrun round, or the launcher of torchft machine m > 0 (machine 0 writes the run folder) joins
    the run there: not refused."""
    from .run.resume import earlier_run

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


def _refuse_a_used_folder(run_dir: Path, cfg) -> None:
    problem = used_folder_problem(run_dir, cfg)
    if problem is None:
        return
    from .tiers.torchrun_launch import note_config_refused

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
            typed_keys = {o.lstrip("+~").split("=", 1)[0] for o in _user_overrides(list(hc.overrides.task))}
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
        from .data import check_tokenizer  # before any data is read: one line if it cannot be found

        try:
            check_tokenizer(cfg.data)
        except ConfigError as e:
            _config_error(run_dir, e)
    log.info(
        "run folder %s; after a crash or kill -9 continue it with:  %s",
        run_dir,
        resume_command(run_dir, program=program_name()),
    )
    from .plan import NonFiniteLoss
    from .run.experiment import Experiment  # torch and transformers load only for a valid config
    from .timing.clock import ClockOverflow

    # ends a run can meet and its record explains: one line here, the traceback in the run's log file
    anticipated: tuple = (NonFiniteLoss, ClockOverflow, AnticipatedEnd)
    try:
        if cfg.cluster.name == "torchft":  # this process starts and watches one process per worker
            # torch's C++ side logs each failed store read with its C++ frames when a peer dies (read
            # once, at torch's first import; the workers get it too): the Python errors say it in a line
            os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            from .tiers.torchft.launcher import WorkerFailed, launch

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
    from .tiers.torchrun_launch import note_config_refused

    note_config_refused(str(e))  # torchrun's later rounds end at once, silent
    print(f"config error: {e}", file=sys.stderr)
    sys.exit(2)


def _writes_record() -> bool:
    """Under torchrun only rank 0 writes (and locks) the run folder."""
    return os.environ.get("RANK", "0") == "0"


#: experiments whose whole study another command runs (not a Hydra sweep of run.py)
STUDY_COMMANDS = {
    "decision_map": "`make decision-map` (python -m analysis.decision_map: 1,008 runs, BENCHMARKS.md says how long)"
}


def one_cell_note(args: List[str]) -> Optional[str]:
    """A study run without -m runs one cell of it; say so, and what runs the whole study."""
    if any(a in ("-m", "--multirun") or a.startswith("hydra.mode=") for a in args):
        return None
    if any(a.split("=", 1)[0] in PRINT_ONLY_FLAGS for a in args):
        return None
    chosen = [a.split("=", 1)[1] for a in args if a.startswith(("experiment=", "+experiment="))]
    if not chosen:
        return None
    name = chosen[-1]
    if name in STUDY_COMMANDS:
        return f"experiment={name} without -m runs one cell of the study; the whole study is {STUDY_COMMANDS[name]}"
    from .paths import conf_dir

    path = conf_dir() / "experiment" / f"{name}.yaml"
    if path.exists() and "sweeper:" in path.read_text():
        return (
            f"experiment={name} is a sweep: without -m this runs one job of it; the whole sweep is "
            f"`python run.py -m experiment={name}`"
        )
    return None


#: Hydra's flags that print something and run nothing
PRINT_ONLY_FLAGS = ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "--shell-completion", "-sc")


def given_run_dir(args: List[str]) -> Optional[str]:
    """The folder the command line's `hydra.run.dir=...` names, read as Hydra and OmegaConf read it
    (quotes, escaped quotes and backslashes, an escaped `${`); None when there is none, when it
    does not parse (check_overrides says so) or when it holds an interpolation Hydra resolves only
    once set up (`${now:...}`: a new folder)."""
    import re

    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = [a for a in args if a.startswith("hydra.run.dir=")]
    if not given:
        return None
    try:
        value = OverridesParser.create().parse_overrides([given[-1]])[0].value()
    except Exception:
        return None
    if not isinstance(value, (str, int, float)):
        return None
    value = str(value)
    if "${" in value:
        if re.search(r"(?<!\\)(\\\\)*\$\{", value):  # an interpolation, not an escaped `${`
            return None
        value = OmegaConf.create({"dir": value}).dir
    return value


def run_dir_problem(args: List[str]) -> Optional[str]:
    """A `hydra.run.dir=` value Hydra's override parser cannot read (a folder name with an
    apostrophe, a space, ...), in one line with the quoted form that works; None when it reads.
    (Hydra would print its parser's error over several lines after its own set-up.)"""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for arg in args:
        if arg.startswith(("hydra.run.dir=", "hydra.sweep.dir=")):
            try:
                parsed = OverridesParser.create().parse_overrides([arg])[0]
                if not parsed.is_sweep_override() and isinstance(parsed.value(), (str, int, float)):
                    continue
                why = "reads it as a list of values (its `,`)"
            except HydraException:
                why = "cannot read it"
            key, value = arg.split("=", 1)
            return f"{key}={value}: Hydra's override parser {why}: quote the folder, e.g. " + shell_quoted(
                key + "=" + hydra_quoted(value)
            )
    return None


def _lock_the_given_run_dir() -> None:
    """A run with hydra.run.dir=D takes D's lock before Hydra writes D/.hydra: a second run
    on a busy folder refuses without touching it. The lock lives as long as this process.
    A command that only prints (--cfg, --info, --help, ...) runs nothing and leaves no folder.
    A run that is not a resume refuses a D that holds an earlier run (used_folder_problem)."""
    if not _writes_record() or any(a in ("-m", "--multirun") or a.startswith("hydra.mode=") for a in sys.argv[1:]):
        return
    if any(a.split("=", 1)[0] in PRINT_ONLY_FLAGS for a in sys.argv[1:]):
        return
    given = given_run_dir(sys.argv[1:])
    if not given:
        return
    cfg = _composed(sys.argv[1:])
    try:
        runlock.acquire(lock_folder(Path(given), cfg))
    except runlock.RunFolderBusy as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a file there, a folder this user cannot write: nothing can be recorded in it
        print(
            f"error: hydra.run.dir={given} cannot hold a run: {e.strerror or e} ({e.filename}); give a folder "
            "you can write, new or a run's own",
            file=sys.stderr,
        )
        sys.exit(2)
    if not _resuming(sys.argv[1:]):  # (check_overrides composes without resume=: cfg.resume is the default)
        _refuse_a_used_folder(Path(given), cfg)


def _resuming(args: List[str]) -> bool:
    """Whether the command line asks for a resume (the last resume= wins, as in Hydra)."""
    given = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("resume=")]
    return bool(given) and given[-1].strip("'\"").lower() in ("true", "1", "yes", "on", "y")


def torchrun_prelude() -> None:
    """Under torchrun every rank runs @hydra.main: make them agree on rank 0's run folder.

    Ranks other than 0 stay quiet and write no .hydra/ files; only rank 0 writes
    the run record (see mecefo_exp/tiers/torchrun.py). The folder is named as a plain run's
    (torchrun_run_dir). In the first round, a folder that holds an earlier run is refused by
    every rank at once (rank 0 says it), and torchrun's later rounds end at once instead of
    resuming it.
    """
    from .tiers.torchrun_launch import launched_by_torchrun, note_config_refused

    if not launched_by_torchrun():
        return
    import torch.distributed as dist

    from .tiers.torchrun import agree_run_dir, init_distributed

    init_distributed()
    folder = given_run_dir(sys.argv[1:])
    if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        proposed = torchrun_run_dir(sys.argv[1:]) if dist.get_rank() == 0 else ""
        folder = agree_run_dir(proposed, Path.cwd() / "runs")
        sys.argv.append(f"hydra.run.dir={hydra_quoted(folder)}")  # quoted: the name holds = and ,
    if folder is not None and not torchrun_restarted() and not _resuming(sys.argv[1:]):
        problem = [used_folder_problem(Path(folder)) if dist.get_rank() == 0 else None]
        if problem[0] is not None:  # said before the others learn it: the first rank to exit ends the group
            note_config_refused(problem[0])
            print(f"error: {problem[0]}", file=sys.stderr, flush=True)
        dist.broadcast_object_list(problem, src=0)
        if problem[0] is not None:
            note_config_refused(problem[0])
            sys.exit(2)
    if dist.get_rank() != 0:
        sys.argv += ["hydra/job_logging=disabled", "hydra.output_subdir=null"]


def torchrun_run_dir(args: List[str]) -> str:
    """The run folder a plain run of these arguments gets (hydra.run.dir composed as Hydra composes
    it: the preset's folder, the time, the overrides Hydra names it by, no trailing `_`), for
    rank 0 to propose under torchrun, where every rank must agree on one before Hydra starts."""
    cfg = api.compose(_user_overrides(args), check=False, hydra_config=True)
    return str(OmegaConf.select(cfg, "hydra.run.dir"))


def check_overrides(args: List[str]) -> Optional[str]:
    """Compose the config once with Hydra's compose API and return, in one line, why the
    overrides cannot be applied (None when they can). Hydra itself reports a key no schema
    has, a value of the wrong type or an option that does not exist in several lines with
    exit 1, after its own set-up; this says it before anything runs. Sweeps (-m) and Hydra's
    own flags are left to Hydra: a sweep's values are lists that only its sweeper expands."""
    unreadable = local_settings_problem(args) or run_dir_problem(args)  # before Hydra reads them
    if unreadable:
        return unreadable
    unknown = unknown_preset(args)
    if unknown:
        return unknown
    flags = {a for a in args if a.startswith("-")}
    if flags and flags <= {"-m", "--multirun"}:
        return _first_job_problem(args)
    # --help, --info, ... are Hydra's; --cfg (print the config) shows what would run, so it is checked too
    if any(a.startswith("-") and a not in ("--cfg", "-c", "--resolve") for a in args):
        return None
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    try:
        cfg = _compose(args)
    except HydraException as e:
        return _one_line(e)
    except (YAMLError, OmegaConfBaseException) as e:  # e.g. a broken conf/local/default.yaml
        return f"{type(e).__name__}: {' '.join(str(e).split())}"
    if cfg.resume:  # a resume runs the folder's own config (check_resume), validated when it starts
        return None
    try:
        validate_run(cfg)  # a key added with + that no schema has, a bad value: before Hydra writes a folder
    except (ConfigError, TraceError) as e:
        return str(e)
    return None


def _first_job_problem(args: List[str]) -> Optional[str]:
    """A sweep: a key its first job cannot compose with, unless a swept preset may declare it."""
    from hydra.errors import HydraException

    job, swept = first_job(args)
    try:
        _compose(job)
    except HydraException as e:
        key = str(getattr(e.__cause__, "full_key", "") or "")
        return None if not key or key.split(".")[0] in swept else _one_line(e)
    except Exception:  # anything else: each job says it
        return None
    return None


def _user_overrides(args: List[str]) -> List[str]:
    return [
        a
        for a in args
        if "=" in a and not a.startswith("-") and not a.lstrip("+~").startswith(("hydra.", "hydra/", "resume="))
    ]


def _compose(args: List[str]):
    cfg = api.compose(_user_overrides(args), check=False)
    _COMPOSED[tuple(args)] = cfg
    return cfg


#: configs composed by check_overrides, by their arguments (entry reads one again for the lock)
_COMPOSED: dict = {}


def _composed(args: List[str]):
    """The config check_overrides composed for `args`, or None (not composed: a sweep, a flag)."""
    return _COMPOSED.get(tuple(args))


def check_resume(args: List[str]) -> Optional[str]:
    """With resume=true: why the given folder cannot be resumed (None when it can), said
    before Hydra writes anything into it and before any compute."""
    if not _resuming(args) or os.environ.get("RANK", "0") != "0":
        return None
    given = given_run_dir(args)
    if not given:
        return (
            "resume=true needs the run's folder: resume=true hydra.run.dir=<folder> (the line each run logs at start)"
        )
    folder = Path(given)
    if not folder.is_dir():
        return f"nothing to resume in {folder}: no such folder"
    if not (folder / "config.yaml").exists():
        return (
            f"nothing to resume in {folder}: it has no config.yaml (not a run folder, or the run was killed "
            "before it started: start it again)"
        )
    try:
        OmegaConf.load(folder / "config.yaml")
    except Exception as e:  # a broken YAML file: say which, in one line
        return f"cannot resume {folder}: its config.yaml cannot be read ({str(e).splitlines()[0]})"
    from .run.resume import config_edited, config_incomplete

    edited = config_edited(folder)
    if edited:
        return f"cannot resume {folder}: {edited}"
    from .methods.checkpointing import complete_steps

    if not complete_steps(folder / "checkpoints") and not complete_steps(folder / "resume"):
        return (
            f"nothing to resume in {folder}: no complete checkpoint in {folder / 'checkpoints'} or "
            f"{folder / 'resume'} (the run stopped before its first checkpoint: start it again)"
        )
    incomplete = config_incomplete(folder)
    if incomplete:
        return f"cannot resume {folder}: {incomplete}"
    changed = settings_changed_on_resume(args, folder)
    if changed:
        return (
            f"resume=true continues {folder} as it was started; refused: {'; '.join(changed)} "
            f"(only {', '.join(RESUME_MAY_CHANGE)} may change on resume: start a new run for other settings)"
        )
    return None


def resume_warning(args: List[str]) -> Optional[str]:
    """With resume=true, on a folder check_resume let through: what the resume cannot check, in one
    line (a config.yaml whose start hash no record keeps); None otherwise."""
    if not _resuming(args) or os.environ.get("RANK", "0") != "0":
        return None
    folder = given_run_dir(args)
    if not folder:
        return None
    from .run.resume import config_unchecked

    return config_unchecked(Path(folder))


def settings_changed_on_resume(args: List[str], folder: Path) -> List[str]:
    """'key=typed (the run has stored)' for every override on the command line that differs
    from the run's own config.yaml, outside RESUME_MAY_CHANGE (those _job applies)."""
    from omegaconf import OmegaConf

    typed, stored = _compose(args), OmegaConf.load(folder / "config.yaml")
    changed = []
    for override in _user_overrides(args):
        key, value = override.lstrip("+~").split("=", 1)
        key = key.split("@", 1)[0].replace("/", ".")  # a group override (method=bamboo) names its node
        if key in RESUME_MAY_CHANGE:
            continue
        new, old = OmegaConf.select(typed, key), OmegaConf.select(stored, key)
        as_plain = lambda v: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
        if as_plain(new) != as_plain(old):
            was = old.get("name", "...") if OmegaConf.is_dict(old) else old
            changed.append(f"{key}={value} (the run has {key}={was})")
    return changed


def _one_line(e: BaseException) -> str:
    """Hydra's composition error in one line: what it could not do, and why."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    head = lines[0] if lines else type(e).__name__
    if head.startswith("In 'config': Could not find"):  # a config group option that does not exist
        options = [line for line in lines[2:] if not line.startswith(("Config search path", "provider="))]
        if not options:
            return head
        wrong = head.split(": ", 1)[1].strip().strip("'").rsplit("/", 1)[-1]
        near = difflib.get_close_matches(wrong, options, n=1)
        return f"{head.split(': ', 1)[1]}{f' (did you mean {near[0]}?)' if near else ''}; allowed: {', '.join(options)}"
    cause = e.__cause__
    if cause is not None:
        why = str(cause).splitlines()[0].strip()
        schema, key = getattr(cause, "object_type", None), getattr(cause, "key", None)
        if why.startswith("Key ") and dataclasses.is_dataclass(schema):
            why = _no_such_setting(str(key), schema)
        return f"{head.rstrip('.')}: {why}"
    if head.endswith(":") and len(lines) > 1:  # a file of conf/ (conf/local/default.yaml): the cause is in the text
        import re

        from .config import schema as schemas

        found = re.match(r"Key '(.+)' not in '(\w+)'", lines[1])
        full = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("full_key:")), None)
        schema = getattr(schemas, found[2], None) if found else None
        why = _no_such_setting(found[1], schema) if found and dataclasses.is_dataclass(schema) else lines[1]
        return f"{head} {full + ': ' if full else ''}{why}"
    return head


def _no_such_setting(key: str, schema) -> str:
    from .config.schema import RENAMED_METHOD_SETTINGS

    names = [f.name for f in dataclasses.fields(schema)]
    if RENAMED_METHOD_SETTINGS.get(key) in names:
        return f"no such setting: {key} is now called {RENAMED_METHOD_SETTINGS[key]}"
    near = difflib.get_close_matches(key, names, n=1)
    return f"no such setting{f' (did you mean {near[0]}?)' if near else ''}; allowed: {', '.join(names)}"


def entry() -> None:
    """The console script (pyproject [project.scripts]) and `python -m mecefo_exp`."""
    from .tiers.torchrun_launch import launched_by_torchrun, refuse_config_under_torchrun

    if launched_by_torchrun():  # before the group forms, once: torchrun restarts a group whose rank exits 2
        refuse_config_under_torchrun(lambda: check_overrides(sys.argv[1:]))
    torchrun_prelude()
    problem = check_overrides(sys.argv[1:]) or check_resume(sys.argv[1:])
    if problem:
        print(f"config error: {problem}", file=sys.stderr)
        sys.exit(2)
    warning = resume_warning(sys.argv[1:])
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    note = one_cell_note(sys.argv[1:])
    if note:
        print(f"note: {note}", file=sys.stderr)
    _lock_the_given_run_dir()
    from .sweeps import FAILED, stopped

    try:
        main()
    except (Terminated, KeyboardInterrupt) as e:  # only a sweep's launching process gets here
        signum = e.signum if isinstance(e, Terminated) else signal.SIGINT
        unfinished = stopped(signal.Signals(signum).name)
        if unfinished is None:  # stopped while Hydra was still setting up: nothing ran
            print(f"stopped by {signal.Signals(signum).name} before any run began", file=sys.stderr)
            sys.exit(128 + signum)
        print(
            f"sweep stopped by {signal.Signals(signum).name}; {len(unfinished)} job(s) did not finish"
            + "".join(f"\n  {line}" for line in unfinished),
            file=sys.stderr,
        )
        sys.exit(128 + signum)
    if FAILED:  # a sweep ran every job, collected, and listed the failed ones: say so in the exit code
        sys.exit(1)
