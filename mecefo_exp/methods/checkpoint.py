"""Checkpoint-restart: the baseline every other method is measured against.

Every `interval` steps (or Young/Daly's sqrt(2 * C * MTBF) with interval=auto) the full
training state is written to disk for real. On any failure the whole job stops:
detection + restart (relaunch, rendezvous, rebuild) + loading the checkpoint, all as
stall, then the steps since the checkpoint are redone (lost work).

Where the job restarts (`method.restart_on`):

- `spares` (default): a spare replaces the failed worker, so training goes on with n workers
  and the loss curve is the failure-free one, bit for bit; only time is lost.
- `survivors` (Varuna's job morphing): the job restarts on the workers still up, the global
  batch re-split over them (the same samples: still bit for bit); a recovered worker waits
  for the next restart to join. `checkpoint_after_failure` also saves after the first step
  of each restart, as Varuna does; `restart_s_by_nodes` times a restart by the nodes the job
  restarted on last.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from ..timing.node_counts import entry_at
from .rollback import RestartConfig, RollbackMethod


@dataclass
class CheckpointConfig(RestartConfig):
    checkpoint_interval: Any = "auto"  # steps between checkpoints, or "auto" for Daly's optimum (intervals.py)
    # restart_on=survivors: a restart's seconds by the ready nodes the job restarted on last;
    # outside the listed counts the nearest end (timing/node_counts.py); empty: method.restart_s throughout
    restart_s_by_nodes: Dict[int, float] = field(default_factory=dict)


class CheckpointRestart(RollbackMethod):
    label = "checkpoint-restart"
    Config = CheckpointConfig

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        if m.restart_s_by_nodes:
            if m.restart_on != "survivors":
                return (
                    "method.restart_s_by_nodes times a restart by the nodes it restarted on last: it needs "
                    "method.restart_on=survivors"
                )
            bad = {k: v for k, v in m.restart_s_by_nodes.items() if not (int(k) >= 1 and float(v) >= 0)}
            if bad:
                return f"method.restart_s_by_nodes={dict(bad)}: node counts >= 1, seconds >= 0"
        return None

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.nodes_at_restart: Optional[int] = None  # ready nodes at the last restart (restart_s_by_nodes)
        by_nodes = cfg.restart_s_by_nodes
        self.restart_by_nodes = {int(k): float(v) for k, v in by_nodes.items()} if by_nodes else None

    def start(self) -> None:
        super().start()
        self.nodes_at_restart = self.n - len(self.down)  # the job's start is its first rendezvous

    def restart_after(self, workers) -> None:
        super().restart_after(workers)
        self.nodes_at_restart = self.n - len(self.down)

    def restart_s(self) -> float:
        if self.restart_by_nodes and self.nodes_at_restart is not None:
            return self.run.costs.stall_s(entry_at(self.restart_by_nodes, self.nodes_at_restart))
        return super().restart_s()
