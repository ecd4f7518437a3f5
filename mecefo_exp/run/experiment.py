"""A run: its parts built from the config (build.py), trained by the loop (loop.py), and its record.

`Experiment(cfg, folder).run()` is what `python run.py` and `mecefo_exp.api.run` call. The parts
and where the run stands are declared on `Context` (context.py), which is what methods see of the
run; each concern lives in its own file of this folder: the building (build.py), the loop
(loop.py) and its quiet steps (quiet_steps.py), the training state (training.py, shape_only.py),
the books that are saved (books.py), resume (resume.py), the record's pieces (record.py) and
the checks on a finished run (invariants.py). Signals (signals.py) and the console (console.py)
are the package's.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Dict, Optional

from .. import runlock
from ..console import Progress
from ..errors import ConfigError
from ..metrics import RunRecords
from ..plan import StepNotCommitted
from ..signals import Terminated, signals_end_the_run
from .build import build_parts
from .context import Context, log
from .loop import Loop, NoProgress
from .record import (
    clock_summary,
    close_a_record_left_behind,
    identity,
    log_done,
    now_iso,
    record_failure,
)

__all__ = ["Experiment", "NoProgress", "Progress", "StepNotCommitted", "Terminated", "signals_end_the_run"]


class Experiment(Context):
    """Builds every part from the config, then `run()` trains and leaves the run record.

    Its attributes are declared on `Context` (context.py), which is what methods see of it.
    """

    def setup(self) -> None:
        """Build every part (build.py); a test may build a run without training it."""
        build_parts(self)

    def train(self) -> None:
        """Train the built run to its end (loop.py); the benchmarks time this alone."""
        Loop(self).train()

    # ------------------------------------------------------------------ the record
    def summary(self, status: str, error: Optional[str] = None) -> Dict:
        """summary.json from the parts built so far."""
        sim = self.clock.now
        committed = self.step * self.tokens_per_step
        data = {
            "status": status,
            **identity(self.cfg, self._git_sha, self.run_dir),
            "steps": self.step,
            "tokens_committed": committed,
            "sim_time_s": sim,
            "wall_time_s": time.perf_counter() - self.wall_start,
            "throughput_tok_s": committed / sim if sim > 0 else None,
            # this machine, wall clock, this segment's computed steps (evals and checkpoints excluded)
            "achieved_tflops_s": None,
            "mfu": None,
            "updated_at": now_iso(),
            "resumes": self.resumes,
            "config_sha256": self.config_sha256,
            **self.books.summary(),
        }
        if self.built("trace"):
            data.update(self.books.trace_summary())
        if self.built("training"):
            data.update(self.training.summary())
        if self.built("costs"):
            data["clock"] = clock_summary(self.timing, self.costs, self.cfg.hardware, self.n_workers)
            data["memory"] = self.timing.memory
            data.update(self.costs.steps.summary(self.books.span, self.trace, self.step, self.n_workers))
        if self.built("method"):
            data.update(self.method.summary())
        data.update(self.tier.summary())
        if error:
            data["error"] = error
        return data

    def run(self) -> Dict:
        """Train and write the record; summary.json says `failed` if anything goes wrong
        (an exception, a full disk, SIGTERM/SIGHUP/Ctrl-C), with the reason."""
        try:
            with signals_end_the_run():
                try:
                    self.setup()
                    with heap_frozen(not self.training.numerics):
                        self.train()
                    summary = self.summary("ok")
                    if not self.cfg.method.get("variant"):
                        self.costs.steps.check_summary(summary)  # what the clock promises (invariants.py)
                    self.records.summary(summary)
                    self.records.close()
                except BaseException as e:
                    if self.progress is not None:
                        self.progress.close()  # give the console back (and its log handlers) before the traceback
                    if not (self.cfg.resume and not self.resumed and isinstance(e, ConfigError)):
                        self._record_failure(e)  # a refused resume leaves the folder's record as it was
                    left = (
                        None
                        if self.is_main
                        else close_a_record_left_behind(self.tier, self._records_if_built(), self._record_failure)
                    )
                    if left is not None:
                        raise left from None
                    raise
        finally:
            if self.folder_locked:
                runlock.release(self.run_dir)
                self.folder_locked = False
            self.tier.shutdown()
        log_done(log, summary, self.run_dir)
        return summary

    def _record_failure(self, e: BaseException) -> None:
        """Leave summary.json `failed` with the reason, even on a full disk."""
        record_failure(self._records_if_built(), lambda error: self.summary("failed", error=error), e, self.run_dir)

    def _records_if_built(self) -> Optional[RunRecords]:
        return self.records if self.built("records") else None


@contextlib.contextmanager
def heap_frozen(enabled: bool):
    """Keep the objects that exist before the loop (torch, transformers, the model, the configs)
    out of the garbage collector's passes while it runs (gc.freeze; both calls are O(1)). A
    numerics-free loop builds a plan of every worker at every event: at 2,048 workers the
    collector's full passes over the old heap took 20 s of a 23 s loop (2.7 s frozen)."""
    if not enabled:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
