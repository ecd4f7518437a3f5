"""One live run per run folder.

Two processes writing one folder interleave metrics.jsonl and prune each other's
checkpoints, so the first run to take the folder's lock owns it and a second one refuses
at once. The lock is an flock (filelock's FileLock) on `<run>/.run.lock`: the kernel drops
it when the owning process dies, however it dies (kill -9 included), so a crashed run never
leaves the folder stuck. Who owns it (pid, host, since when) is written beside it in
`<run>/.run.owner`, read only to word the refusal; it may be stale, the lock never is.

Within one process the lock is re-entrant: run.py takes it before Hydra writes .hydra/,
the trainer takes it again, and it is released when the last holder lets go.
(flock is per open file, so a second FileLock on the same path in the same process would
block on itself: hence one lock object per folder per process.)
"""

from __future__ import annotations

import datetime
import errno
import json
import logging
import os
import socket
from pathlib import Path
from typing import Dict

from filelock import FileLock, Timeout

from .errors import ConfigError

log = logging.getLogger(__name__)

LOCK_NAME, OWNER_NAME = ".run.lock", ".run.owner"


class RunFolderBusy(ConfigError):
    """Another live process owns the run folder."""


_held: Dict[Path, FileLock] = {}


def acquire(run_dir) -> None:
    """Take the folder's lock (or count one more hold); RunFolderBusy if another process has it."""
    run_dir = Path(os.path.abspath(run_dir))
    lock = _held.get(run_dir)
    if lock is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(run_dir / LOCK_NAME), timeout=0, thread_local=False, fallback_to_soft=False)
        try:
            lock.acquire()
        except Timeout:
            raise RunFolderBusy(
                f"run folder {run_dir} is in use by {owner(run_dir)}: wait for that run to end "
                "(or stop it), or pick another hydra.run.dir"
            ) from None
        except OSError as e:
            if e.errno != errno.ENOSYS:
                raise
            # a file system without flock (some network mounts): run unprotected rather than not at all
            log.warning("%s: this file system has no flock; the run folder is not locked", run_dir)
            return
        _held[run_dir] = lock
        _write_owner(run_dir)
        return
    lock.acquire()  # re-entrant: counts the hold


def release(run_dir) -> None:
    run_dir = Path(os.path.abspath(run_dir))
    lock = _held.get(run_dir)
    if lock is None:
        return
    lock.release()
    if not lock.is_locked:
        _held.pop(run_dir, None)


def busy(run_dir) -> bool:
    """Whether another process holds the folder's lock now (its run is alive)."""
    run_dir = Path(os.path.abspath(run_dir))
    if run_dir in _held or not (run_dir / LOCK_NAME).exists():
        return False
    probe = FileLock(str(run_dir / LOCK_NAME), timeout=0, thread_local=False, fallback_to_soft=False)
    try:
        probe.acquire()
    except Timeout:
        return True
    except OSError:  # no flock here: nobody can tell; say free
        return False
    probe.release()
    return False


def owner(run_dir) -> str:
    """'pid P on host H (since T)', from the owner file the lock holder wrote."""
    try:
        info = json.loads((Path(run_dir) / OWNER_NAME).read_text())
        return f"pid {info['pid']} on host {info['host']} (since {info['since']})"
    except (OSError, ValueError, KeyError):
        return "another process (owner unknown)"


def _write_owner(run_dir: Path) -> None:
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    try:
        (run_dir / OWNER_NAME).write_text(json.dumps(info) + "\n")
    except OSError as e:  # the lock holds without it; only the refusal's wording suffers
        log.warning("cannot write %s: %s", run_dir / OWNER_NAME, e)
