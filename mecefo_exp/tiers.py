"""Where the workers run: the simulated tier, torchrun ranks, or torchft replica groups.

Each tier answers the same questions for the loop: which worker this process is and whether it
writes the run record (`rank`, `leader`, `is_main`), how to wait for the others (`barrier`), how
a trace event reaches the method (`deliver`), what to do before planning a step (`sync`), and
what it adds to summary.json. The simulated tier (`LocalTier`) does nothing where the others
act, so the loop never asks which tier it is on.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List

from .config import ConfigError
from .faults import FAIL

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

    @property
    def joining(self) -> bool:
        """A restarted torchft worker: its books come from the peer that heals it."""
        return False

    def start(self, device: torch.device) -> torch.device:
        """Join the other processes before anything is written; returns this process's device."""
        return device

    def make_cluster(self, run, training, modes, cluster_cfg, tcfg):
        """The executor of a step's plan (None without numerics: nothing is executed)."""
        if not training.numerics:
            return None
        return self.cluster_class()(training.model, training.stream, modes, training.device,
                                    cluster_cfg.chunk_microbatches, grad_accum=tcfg.grad_accum,
                                    precision=tcfg.precision, compile=tcfg.compile, **self.cluster_extra(run))

    def cluster_class(self):
        from .cluster.local import LocalCluster  # tensors: imported only when numerics run

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


class TorchrunTier(LocalTier):
    """One worker per torchrun rank; gradients all-reduced (cluster/torchrun.py)."""

    def start(self, device: torch.device) -> torch.device:
        import torch.distributed as dist

        from .cluster import launched_by_torchrun
        from .cluster.torchrun import init_distributed

        if not launched_by_torchrun():
            raise ConfigError("cluster=torchrun needs torchrun: torchrun --nproc-per-node=N run.py cluster=torchrun ...")
        init_distributed(self._backend)
        self.rank, world = dist.get_rank(), dist.get_world_size()
        if world != self.n_workers:
            raise ConfigError(f"cluster.n_workers={self.n_workers} but torchrun started {world} ranks; "
                              f"set cluster.n_workers={world}")
        if device is not None and device.type == "cuda":  # None: numerics off
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return device

    def __init__(self, cfg, run_dir: Path):
        super().__init__(cfg, run_dir)
        self._backend = cfg.cluster.backend

    def cluster_class(self):
        from .cluster.torchrun import TorchrunCluster

        return TorchrunCluster

    def share_profile(self, timing) -> None:
        if timing.info["compute"] == "measured":
            from .cluster.torchrun import broadcast_object

            timing.profile = broadcast_object(timing.profile)  # rank 0 measured it

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()


class TorchftTier(LocalTier):
    """One process per worker; who is alive comes from torchft's quorum (cluster/torchft.py)."""

    holds_folder_lock = False

    def __init__(self, cfg, run_dir: Path):
        super().__init__(cfg, run_dir)
        from .cluster.torchft_network import ENV_INCARNATION, ENV_WORKER

        self.rank = int(os.environ[ENV_WORKER])
        self.incarnation = int(os.environ.get(ENV_INCARNATION, "0"))
        self.leader = 0 if self.incarnation == 0 else -1  # a restart learns it from a peer
        self.cluster_cfg = cfg.cluster
        self.membership = None  # built with the cluster: its Manager carries the step's collectives

    @property
    def joining(self) -> bool:
        return self.membership is not None and self.membership.joining

    def cluster_class(self):
        from .cluster.torchft import TorchftCluster

        return TorchftCluster

    def cluster_extra(self, run) -> Dict:
        from .cluster.torchft import TorchftMembership
        from .cluster.torchft_network import ENV_LIGHTHOUSE, ENV_STORE

        self.membership = TorchftMembership(run, self.rank, self.incarnation, os.environ[ENV_LIGHTHOUSE],
                                            os.environ[ENV_STORE], self.cluster_cfg, membership_from_quorum=self.kill)
        return {"worker": self.rank, "manager": self.membership.manager, "group": self.membership.group}

    def begin(self, resumed: bool) -> bool:
        if self.membership is None:
            return resumed
        self.membership.start()
        return self.membership.joining  # a restarted worker's state comes from a peer

    def barrier(self) -> None:
        if self.membership is not None:
            self.membership.barrier()

    def deliver(self, kind: str, events: List, run) -> None:
        if self.kill and self.membership is not None:
            # the victim dies; the survivors wait for the quorum to show it
            self.membership.on_trace_events(kind, events)
        else:
            super().deliver(kind, events, run)

    def sync(self) -> None:
        if self.membership is not None:
            self.membership.sync()  # the quorum shows who is alive; the method hears it

    def summary(self) -> Dict:
        return {"torchft": self.membership.summary()} if self.membership is not None else {}

    def shutdown(self) -> None:
        if self.membership is not None:
            self.membership.shutdown()


def build_tier(cfg, run_dir: Path) -> LocalTier:
    name = cfg.cluster.name
    if name == "torchrun":
        return TorchrunTier(cfg, run_dir)
    if name == "torchft":
        return TorchftTier(cfg, run_dir)
    return LocalTier(cfg, run_dir)

