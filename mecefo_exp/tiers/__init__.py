"""Where the workers run: the simulated tier, torchrun ranks, or torchft replica groups.

Each tier answers the same questions for the loop (the `Tier` protocol below): which worker this
process is and whether it writes the run record, how to wait for the others, how a trace event
reaches the method, what to do before planning a step, and what it adds to summary.json. Each
tier lives in its own module (`local`, `torchrun`, `torchft/`) with its own config checks; the
simulated tier does nothing where the others act, so the loop never asks which tier it is on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Protocol

from ..registry import tier_class

if TYPE_CHECKING:
    import torch


class Tier(Protocol):
    """What the loop and the run's parts ask of the tier they run on."""

    n_workers: int
    rank: int  # this process's worker (0 in the simulated tier)
    leader: int  # the worker whose process writes the run record
    holds_folder_lock: bool  # whether this process locks the run folder
    kill: bool  # failure.kill: a trace failure kills the worker's process for real

    @property
    def is_main(self) -> bool: ...

    @property
    def joining(self) -> bool:
        """A restarted worker whose books come from the peer that heals it."""

    def record_left_behind(self) -> Optional[BaseException]:
        """After this process failed and another writes the record: why that writer is gone and
        nobody else can close it (the end to raise instead), or None."""

    @property
    def closes_a_left_record(self) -> bool:
        """Whether this process closes such a record (one per machine)."""

    def start(self, device: Optional[torch.device]) -> Optional[torch.device]:
        """Join the other processes before anything is written; returns this process's device."""

    def make_cluster(self, run, training, modes, cluster_cfg, tcfg):
        """The executor of a step's plan (None without numerics)."""

    def share_profile(self, timing) -> None: ...

    def begin(self, resumed: bool) -> bool:
        """Before the first step; returns whether this process continues a run already under way."""

    def barrier(self) -> None: ...

    def deliver(self, kind: str, events: List, run) -> None:
        """Failures (or recoveries) of one instant reach the method."""

    def sync(self) -> None:
        """Before planning a step."""

    def summary(self) -> Dict: ...

    def shutdown(self) -> None: ...


def build_tier(cfg, run_dir: Path) -> Tier:
    """cluster.name's tier (mecefo_exp/registry.py names each one's module)."""
    return tier_class(cfg.cluster.name)(cfg, Path(run_dir))
