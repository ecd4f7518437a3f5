"""cluster=torchft in a worker process: the tier the loop talks to; the quorum, the heal and the
record's hand-over are `TorchftMembership`'s (membership.py), the processes the launcher's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

from ..local import LocalTier
from .network import ENV_INCARNATION, ENV_LIGHTHOUSE, ENV_STORE, ENV_WORKER

if TYPE_CHECKING:
    from .membership import TorchftMembership


class TorchftTier(LocalTier):
    """One process per worker; who is alive comes from torchft's quorum (membership.py)."""

    holds_folder_lock = False

    def __init__(self, cfg, run_dir: Path):
        super().__init__(cfg, run_dir)
        self.rank = int(os.environ[ENV_WORKER])
        self.incarnation = int(os.environ.get(ENV_INCARNATION, "0"))
        self.leader = 0 if self.incarnation == 0 else -1  # a restart learns it from a peer
        self.cluster_cfg = cfg.cluster
        self.membership: Optional[TorchftMembership] = (
            None  # built with the cluster: its Manager carries the step's collectives
        )

    @property
    def joining(self) -> bool:
        return self.membership is not None and self.membership.joining

    def cluster_class(self):
        from .collectives import TorchftCluster  # torch and torchft: imported when numerics run

        return TorchftCluster

    def cluster_extra(self, run) -> Dict:
        from .membership import TorchftMembership

        self.membership = TorchftMembership(
            run,
            self.rank,
            self.incarnation,
            os.environ[ENV_LIGHTHOUSE],
            os.environ[ENV_STORE],
            self.cluster_cfg,
            membership_from_quorum=self.kill,
        )
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
