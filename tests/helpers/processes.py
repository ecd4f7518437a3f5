"""Reading and signalling processes a test started, which may end at any moment.

A worker the run just killed, one that finished, a rank dying with its agent: each can exit
between any two reads of a test. Every helper here treats a process that is gone (ESRCH,
ENOENT, an exited zombie) as gone, never as an error, so a test fails only on what the run did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import List, Optional


def read_proc(pid: int, name: str) -> Optional[bytes]:
    """/proc/<pid>/<name>, or None when the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # ProcessLookupError, FileNotFoundError; PermissionError: another user's, not ours
        return None


def is_alive(pid: int) -> bool:
    """Whether `pid` runs: neither gone nor an exited zombie."""
    stat = read_proc(pid, "stat")
    return stat is not None and stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def children(pid: int) -> List[int]:
    """The child processes of `pid` (none once it is gone)."""
    found: List[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        found += [int(c) for c in (read_proc(pid, f"task/{task.name}/children") or b"").split()]
    return found


def descendants(pid: int) -> List[int]:
    """Every live process below `pid` (torchrun starts each rank in a session of its own)."""
    found: List[int] = []
    for child in children(pid):
        found += [child, *descendants(child)]
    return found


def kill_gone_or_not(pids, sig: int = signal.SIGKILL) -> None:
    """Signal each of `pids`; one already gone is not an error (a launcher's workers die with it:
    PR_SET_PDEATHSIG may end them between the launcher's kill and theirs)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def rows_so_far(path: Path) -> List[dict]:
    """The rows of a JSON-lines file a run is writing: whole lines only (the writer may be in the
    middle of the last one), none before the file exists."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]
