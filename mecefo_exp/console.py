"""What a run says on the console: job prefixes, the resume line, events as they happen.

The files (metrics.jsonl, events.jsonl, ...) are the record; these lines are for the person
watching: one short INFO line per failure, recovery, neighbour assignment, rollback,
restart or reconfiguration, so a run that degrades does not look like one that does not.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

# Events worth a console line (checkpoints and snapshots are routine: only in events.jsonl).
LOUD_EVENTS = (
    "fail",
    "recover",
    "neighbor",
    "neighbor_release",
    "rollback",
    "restart",
    "fatal",
    "reconfigure",
    "rebalance",
    "resume",
)


class _PrefixFormatter(logging.Formatter):
    """Wraps a handler's formatter and puts a prefix in front of every line it formats."""

    def __init__(self, prefix: str, inner: Optional[logging.Formatter]):
        super().__init__()
        self.prefix, self.inner = prefix, inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return self.prefix + self.inner.format(record)


def install_console(hydra_cfg=None) -> None:
    """In a sweep, start every console line with `[job N]` (jobs of a joblib sweep interleave).

    Only console handlers get it: each job's own log file in its folder needs no prefix.
    """
    from hydra.types import RunMode

    if hydra_cfg is None or hydra_cfg.mode != RunMode.MULTIRUN:
        return
    prefix = f"[job {hydra_cfg.job.num}] "
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            if not isinstance(handler.formatter, _PrefixFormatter):
                handler.setFormatter(_PrefixFormatter(prefix, handler.formatter))


def hydra_quoted(value: str) -> str:
    """`value` as a quoted Hydra override value that Hydra and OmegaConf read back as `value`.
    Single quotes, or double quotes for a value holding an apostrophe and no double quote (easier
    to read and to paste); an interpolation's `${` escaped, with the backslashes before it doubled
    (OmegaConf's rule); the backslashes before a quote or the closing quote doubled and that
    quote escaped (Hydra's rule: it leaves every other backslash as it is)."""
    quote = '"' if "'" in value and '"' not in value else "'"
    value = re.sub(r"(\\*)\$\{", lambda m: m[1] * 2 + "\\${", value)
    value = re.sub(rf"(\\*){quote}", lambda m: m[1] * 2 + "\\" + quote, value)
    value = re.sub(r"(\\+)$", lambda m: m[1] * 2, value)
    return f"{quote}{value}{quote}"


def shell_quoted(word: str) -> str:
    """`word` as one shell word: in double quotes (`\\`, `"`, `$` and backquote escaped) unless it
    holds `!` (history expansion in an interactive bash) or a line break, then in single quotes."""
    if "!" in word or "\n" in word:
        return shlex.quote(word)
    return '"' + re.sub(r'(["$`\\])', r"\\\1", word) + '"'


def program_name() -> str:
    """How this process was started, as a shell runs it again from the same folder: `python run.py`
    (the interpreter by the name the shell finds it under, else by its path: `.venv/bin/python
    run.py`), `python -m mecefo_exp` or `mecefo-exp`."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "run.py":
        return f"{_interpreter()} {shlex.quote(_unresolved(argv0))}"
    if argv0.name == "__main__.py" and argv0.parent.name == "mecefo_exp":
        return f"{_interpreter()} -m mecefo_exp"
    found = shutil.which("mecefo-exp")
    if argv0.name != "mecefo-exp" or (found and os.path.abspath(found) == os.path.abspath(argv0)):
        return "mecefo-exp"
    return shlex.quote(_unresolved(argv0))


def _interpreter() -> str:
    """This Python as the shell runs it: `python` or `python3` when that is the one on PATH, else
    its path (relative to the working folder when inside it; a venv's python is not resolved to the
    interpreter it links to, which lacks the venv's packages)."""
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and os.path.abspath(found) == os.path.abspath(sys.executable):
            return name
    return shlex.quote(_unresolved(Path(sys.executable)))


def _unresolved(path: Path) -> str:
    """`path` relative to the working folder when inside it, else absolute; links kept."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return relative if not relative.startswith("..") else absolute


def shown_path(path) -> str:
    """A folder as the lines a run prints name it: relative to the working folder when inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def resume_command(run_dir: Path, program: str = "python run.py") -> str:
    """The exact line that continues this run after a crash, ready to paste into a shell (bash,
    sh, zsh) whatever the folder's name: an apostrophe, a quote, `$`, `!`, a space or a backslash.

    The folder name holds '=' and ',' (Hydra's override_dirname), which Hydra's override
    parser reads as syntax unless the value is quoted (hydra_quoted); the whole argument is
    then quoted for the shell (shell_quoted).
    """
    return f"{program} resume=true {shell_quoted('hydra.run.dir=' + hydra_quoted(shown_path(run_dir)))}"


def describe_event(row: Dict[str, Any]) -> Optional[str]:
    """One short line for a loud event, None for a routine one."""
    kind = row["kind"]
    if kind not in LOUD_EVENTS:
        return None
    d = row.get("detail") or {}
    who = f" worker {row['worker']}" if row.get("worker") is not None else ""
    head = f"step {row['step']} sim {row['sim_time_s']:.4g}s: {kind}{who}"
    if d.get("job"):  # a job-wide fault: every worker up, one row
        return f"{head} (job-wide: {d.get('workers')} workers)"
    if kind == "rollback":
        return f"{head} -> step {d.get('to_step')} ({d.get('reason')}; {d.get('lost_steps')} steps lost)"
    if kind in ("neighbor", "neighbor_release"):
        return f"{head} (neighbour {d.get('neighbor')})"
    if kind == "restart":
        return f"{head} from step {d.get('from_step')}" + (f" ({d['source']})" if "source" in d else "")
    if kind == "fatal":
        return f"{head} (down: {d.get('down')})"
    if kind == "reconfigure":
        return f"{head} ({d.get('alive')} alive)" if "alive" in d else head
    if kind == "resume":
        return f"{head} from {d.get('checkpoint')}"
    return head


class EventPrinter:
    """Logs loud events at INFO, at most `limit` per run (a numerics-free 60,000-step run can see
    thousands); the rest are in events.jsonl."""

    def __init__(self, logger: logging.Logger, limit: int):
        self.log, self.limit, self.n = logger, limit, 0

    def __call__(self, row: Dict[str, Any]) -> None:
        line = describe_event(row)
        if line is None or self.limit == 0:
            return
        self.n += 1
        if self.n <= self.limit:
            self.log.info(line)
        if self.n == self.limit:
            self.log.info("(trainer.log_events=%d lines printed; further events only in events.jsonl)", self.limit)


def progress_redirect():
    """Route log lines through tqdm while a bar is drawn, so they do not tear it."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


class Progress:
    """A tqdm bar on a terminal, plain log lines otherwise (CI, files, sweeps).

    Its lines go to `logger` (the trainer's, so that a run's console reads as one voice).
    """

    def __init__(self, tcfg, total: int, quiet: bool = False, logger: Optional[logging.Logger] = None):
        self.wanted = tcfg.progress
        mode = "none" if quiet else tcfg.progress
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode, self.every, self.total = mode, max(1, tcfg.log_every), total
        self.log = logger or logging.getLogger(__name__)
        self.bar = None
        self.t0 = time.perf_counter()
        self._lined = 0  # the step of the last numerics-free update
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True)
            # log lines (events, evaluations) go through tqdm.write while the bar is drawn
            self._redirect = progress_redirect()
            self._redirect.__enter__()

    def update(
        self,
        step: int,
        loss: Optional[float],
        sim_s: float,
        tokens_per_step: int,
        alive: int,
        tflops_s: Optional[float] = None,
    ) -> None:
        if self.mode == "none":
            return
        tok_s = step * tokens_per_step / max(1e-9, time.perf_counter() - self.t0)
        if loss is None:  # numerics off
            if self.bar is not None:
                self.bar.n = step
                self.bar.set_postfix(sim=f"{sim_s:.0f}s", alive=alive, refresh=False)
                self.bar.refresh()
            elif step // self.every > self._lined // self.every or step == self.total:
                # an event-driven run jumps over steps: a line whenever a multiple of log_every is passed
                self.log.info("step %d/%d  sim %.1fs  alive %d", step, self.total, sim_s, alive)
            self._lined = step
            return
        ppl = math.exp(min(loss, 50.0))
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(
                loss=f"{loss:.3f}",
                ppl=f"{ppl:.1f}",
                tok_s=f"{tok_s:.0f}",
                tflops=f"{tflops_s or 0:.3g}",
                alive=alive,
                refresh=False,
            )
            self.bar.refresh()
        elif step % self.every == 0 or step == self.total:
            self.log.info(
                "step %d/%d  loss %.4f  ppl %.1f  %.0f tok/s  %.3g TFLOP/s (wall)  sim %.1fs  alive %d",
                step,
                self.total,
                loss,
                ppl,
                tok_s,
                tflops_s or 0.0,
                sim_s,
                alive,
            )

    def lines_only(self) -> None:
        """This process now speaks for the run, after another drew the bar: plain lines, which do
        not fight the other's bar on the terminal."""
        if self.wanted != "none":
            self.mode = "lines"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self._redirect.__exit__(None, None, None)
            self.bar = None


def speak_for_the_run(progress: Optional[Progress]) -> None:
    """This process now writes the record (a torchft worker whose writer died): its console says
    what the writer said, in lines rather than a second bar."""
    if progress is not None:
        progress.lines_only()
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:
            handler.setLevel(logging.INFO)
