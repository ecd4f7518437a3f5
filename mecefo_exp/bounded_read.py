"""Reading an input file the user names, bounded before it is read.

A path given to the harness (a failure trace, a run folder's summary.json) may be anything: a
FIFO that never ends, a link to /dev/zero, a sparse file of gigabytes, one line of gigabytes. Read
whole, each hangs the command or exhausts its memory before any check runs. `open_bounded` and
`read_text_bounded` accept regular files only and check the size before reading a byte; what they
refuse is one line naming the file, what it is (or its size) and the bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Union

#: the bound on a failure trace (a CSV of events): a 32 MB trace of the shortest rows (2.17M events)
#: peaks at 0.98 GB read (CPython 3.11), the bound a drawn trace has (failures: 1 GB); the node traces
#: this checkout replays (conf/failure/traces/, tests/fixtures/artifact_generated/) are at most 13 kB
MAX_TRACE_FILE_BYTES = 32 * 1024 * 1024
#: the bound on a JSON record a run leaves (summary.json, profile.json): a few kB each in practice
MAX_RECORD_FILE_BYTES = 64 * 1024 * 1024


class InputRefused(ValueError):
    """The file is not a regular file, or larger than its bound: the message is the one line to print."""


def _describe(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _human(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def open_bounded(
    path: Union[str, Path], max_bytes: int, what: str = "", mode: str = "r", **kwargs
) -> Union[IO, "_Bounded"]:
    """Open `path` for reading if it is a regular file (links followed) of at most `max_bytes`.

    The check is made on the opened descriptor (a file swapped between a check and the open is
    still checked), without blocking on a FIFO (opened non-blocking, then refused). `what` names
    the setting in the message (`failure.path=`). FileNotFoundError and other OSErrors pass through.
    """
    label = f"{what}{path}"
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputRefused(f"{label}: {_describe(st.st_mode)}, expected a regular file")
        if st.st_size > max_bytes:
            raise InputRefused(
                f"{label}: {_human(st.st_size)} ({st.st_size:,} bytes), larger than the "
                f"{_human(max_bytes)} allowed for this file"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        f = os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise
    return _Bounded(f, max_bytes, label) if "b" not in mode else f


class _Bounded:
    """A text file that stops at `max_bytes` characters read even if the file grew after the check
    (a file still being written): reading on raises InputRefused."""

    def __init__(self, f, max_bytes: int, label: str) -> None:
        self._f, self._left, self._label, self._max = f, max_bytes + 1, label, max_bytes

    def _take(self, text: str) -> str:
        self._left -= len(text)
        if self._left <= 0:
            raise InputRefused(f"{self._label}: grew past the {_human(self._max)} allowed for this file while read")
        return text

    def read(self, size: int = -1) -> str:
        return self._take(self._f.read(self._left if size is None or size < 0 else min(size, self._left)))

    def readline(self, size: int = -1) -> str:
        return self._take(self._f.readline(self._left if size is None or size < 0 else min(size, self._left)))

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def read_text_bounded(path: Union[str, Path], max_bytes: int, what: str = "", encoding: str = "utf-8") -> str:
    """The whole text of a regular file of at most `max_bytes` (InputRefused otherwise)."""
    with open_bounded(path, max_bytes, what, encoding=encoding) as f:
        return f.read()
