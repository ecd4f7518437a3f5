"""cluster=torchrun before torch loads: whether torchrun started this process, its config check,
and a refused config said once across torchrun's restarts."""

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import ConfigError


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process (read from the environment, without importing torch)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def refuse_config_under_torchrun(check: Callable[[], Optional[str]]) -> None:
    """Under torchrun, before the process group forms: a config error (`check`'s line) ends this
    rank with exit 2, said once (rank 0 of the first round). torchrun restarts a group whose rank
    exits non-zero, up to --max-restarts: a later round of the same torchrun finds this rank's note
    (its agent is every round's parent) and ends at once, silent."""
    note, last = _refusal_note()
    if note.exists():
        if last:
            note.unlink(missing_ok=True)
        sys.exit(2)
    problem = check()
    if problem is None:
        return
    try:
        if not last:
            note.write_text(problem)
    except OSError:
        pass
    if os.environ.get("RANK") == "0" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        print(f"config error: {problem}", file=sys.stderr)
    sys.exit(2)


def _refusal_note():
    """The file a refused round leaves for the later rounds of the same torchrun (keyed by its agent's
    pid and run id), and whether this is the last round (which removes it)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    note = Path(tempfile.gettempdir()) / f"mecefo-config-refused-{os.getppid()}-{run_id}"
    return note, os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")


def note_config_refused(problem: str) -> None:
    """A config error found after composition (a resume's stored config, a tokenizer, a trace too large
    to draw) under torchrun: leave the note `refuse_config_under_torchrun` finds, so that torchrun's
    later rounds end at once instead of finding and printing it again."""
    if not launched_by_torchrun():
        return
    note, last = _refusal_note()
    try:
        if not last:
            note.write_text(problem)
    except OSError:
        pass


def check_config(cfg: Any) -> None:
    """cluster=torchrun's own settings (raises ConfigError)."""
    if not launched_by_torchrun():
        raise ConfigError(
            "cluster=torchrun needs torchrun to start the ranks: torchrun --nproc-per-node=N run.py "
            "cluster=torchrun cluster.n_workers=N ...; without torchrun use cluster=local"
        )
