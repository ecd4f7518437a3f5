"""The console script (`mecefo-exp`, `python run.py`, `python -m mecefo_exp`): the command line's
checks before Hydra starts (preflight.py), the given run folder's lock, under torchrun the ranks'
agreement on one run folder, then Hydra's `main` (job.py), and a sweep's exit code.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import List

from omegaconf import OmegaConf

from .. import api, runlock
from ..config.hydra_glue import torchrun_restarted
from ..console import hydra_quoted
from ..signals import Terminated
from .job import lock_folder, main, refuse_a_used_folder, used_folder_problem, writes_record
from .preflight import (
    PRINT_ONLY_FLAGS,
    check_overrides,
    check_resume,
    composed,
    given_run_dir,
    one_cell_note,
    resume_warning,
    resuming,
    user_overrides,
)


def entry() -> None:
    """The command line as `mecefo_exp.cli.entry` runs it."""
    from ..tiers.torchrun_launch import launched_by_torchrun, refuse_config_under_torchrun

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


def _lock_the_given_run_dir() -> None:
    """A run with hydra.run.dir=D takes D's lock before Hydra writes D/.hydra: a second run
    on a busy folder refuses without touching it. The lock lives as long as this process.
    A command that only prints (--cfg, --info, --help, ...) runs nothing and leaves no folder.
    A run that is not a resume refuses a D that holds an earlier run (used_folder_problem)."""
    if not writes_record() or any(a in ("-m", "--multirun") or a.startswith("hydra.mode=") for a in sys.argv[1:]):
        return
    if any(a.split("=", 1)[0] in PRINT_ONLY_FLAGS for a in sys.argv[1:]):
        return
    given = given_run_dir(sys.argv[1:])
    if not given:
        return
    cfg = composed(sys.argv[1:])
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
    if not resuming(sys.argv[1:]):  # (check_overrides composes without resume=: cfg.resume is the default)
        refuse_a_used_folder(Path(given), cfg)


def torchrun_prelude() -> None:
    """Under torchrun every rank runs @hydra.main: make them agree on rank 0's run folder.

    Ranks other than 0 stay quiet and write no .hydra/ files; only rank 0 writes
    the run record (see mecefo_exp/tiers/torchrun.py). The folder is named as a plain run's
    (torchrun_run_dir). In the first round, a folder that holds an earlier run is refused by
    every rank at once (rank 0 says it), and torchrun's later rounds end at once instead of
    resuming it.
    """
    from ..tiers.torchrun_launch import launched_by_torchrun, note_config_refused

    if not launched_by_torchrun():
        return
    import torch.distributed as dist

    from ..tiers.torchrun import agree_run_dir, init_distributed

    init_distributed()
    folder = given_run_dir(sys.argv[1:])
    if not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        proposed = torchrun_run_dir(sys.argv[1:]) if dist.get_rank() == 0 else ""
        folder = agree_run_dir(proposed, Path.cwd() / "runs")
        sys.argv.append(f"hydra.run.dir={hydra_quoted(folder)}")  # quoted: the name holds = and ,
    if folder is not None and not torchrun_restarted() and not resuming(sys.argv[1:]):
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
    cfg = api.compose(user_overrides(args), check=False, hydra_config=True)
    return str(OmegaConf.select(cfg, "hydra.run.dir"))
