"""The simulated tier: n workers in one process. It does nothing where the other tiers act
(nobody to wait for, nobody to heal), so the loop never asks which tier it is on."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

from ..failures import FAIL

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class LocalTier:
    """n simulated workers in one process: rank 0 writes the record; nobody to wait for."""

    #: the process that writes the folder locks it (cluster=torchft: the launcher holds the lock)
    holds_folder_lock = True

    def __init__(self, cfg, run_dir: Path):
        self.n_workers = cfg.cluster.n_workers
        self.run_dir = Path(run_dir)
        self.kill = cfg.failure.kill
        self.rank = 0  # torchrun rank or torchft worker; 0 in the simulated tier
        self.leader = 0  # the process that writes the run record (torchft: moves when it dies)
        self.kills_done: set = set()  # failure.kill: trace failures that already killed a rank

    @property
    def is_main(self) -> bool:
        return self.rank == self.leader

    def record_left_behind(self) -> Optional[BaseException]:
        """After this process failed: why no writer is left to close the record (None: there is one)."""
        return None

    @property
    def closes_a_left_record(self) -> bool:
        return True

    @property
    def joining(self) -> bool:
        """A restarted torchft worker: its books come from the peer that heals it."""
        return False

    def start(self, device: Optional[torch.device]) -> Optional[torch.device]:
        """Join the other processes before anything is written; returns this process's device."""
        return device

    def make_cluster(self, run, training, modes, cluster_cfg, tcfg):
        """The executor of a step's plan (None without numerics: nothing is executed)."""
        if not training.numerics:
            return None
        return self.cluster_class()(
            training.model,
            training.stream,
            modes,
            training.device,
            cluster_cfg.chunk_microbatches,
            grad_accum=tcfg.grad_accum,
            precision=tcfg.precision,
            compile=tcfg.compile,
            **self.cluster_extra(run),
        )

    def cluster_class(self):
        from ..numerics.executor import LocalCluster  # tensors: imported only when numerics run

        return LocalCluster

    def cluster_extra(self, run) -> Dict:
        return {}

    def share_profile(self, timing) -> None:
        """Every process must charge the same kernel seconds."""

    def begin(self, resumed: bool) -> bool:
        """Before the first step; returns whether this process continues a run already under way."""
        if self.kill:
            kills = self.run_dir / "kills.txt"
            self.kills_done = set(kills.read_text().split()) if kills.exists() else set()
        return resumed

    def barrier(self) -> None:
        pass

    def deliver(self, kind: str, events: List, run) -> None:
        """Failures (or recoveries) at one instant reach the method together: a job restart
        happens once for a whole machine."""
        for ev in events:
            if kind == FAIL and self.kill:
                self.kill_if_mine(ev)
            run.membership_event(kind, ev.worker, {"trace_time_s": ev.time})
        if kind == FAIL:
            run.method.on_failures([ev.worker for ev in events])
        else:
            run.method.on_recoveries([ev.worker for ev in events])

    def kill_if_mine(self, ev) -> None:
        """failure.kill: the failing worker's rank dies for real (once per trace event).

        It first notes the event in kills.txt, so that after torchrun's restart the resumed
        run treats this failure as already happened (a simulated restart from the same
        checkpoint, which is what the real restart just did) and does not die again.
        """
        key = f"{ev.time:.9f}:{ev.worker}"
        if key in self.kills_done or ev.worker != self.rank:
            return
        with open(self.run_dir / "kills.txt", "a") as f:
            f.write(key + "\n")
            f.flush()
            os.fsync(f.fileno())
        log.warning("failure.kill: worker %d (rank %d) is killed at simulated %.3f s", ev.worker, self.rank, ev.time)
        os.kill(os.getpid(), signal.SIGKILL)

    def sync(self) -> None:
        """Before planning a step: nothing to agree on in one process."""

    def summary(self) -> Dict:
        return {}

    def shutdown(self) -> None:
        pass
