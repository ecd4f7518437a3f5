"""JIT checkpointing: checkpoint just in time, after the failure (Gupta et al., EuroSys 2024).

In data parallelism every healthy replica holds the whole training state. So no checkpoint is
written while training runs; when a worker fails, the job stops, a healthy replica writes the
state of the start of the step in flight, and the job restarts (a spare in the failed worker's
place) from that checkpoint: only the step in flight is lost and redone. The paper: recovery
"with just a single minibatch iteration of work replayed by all GPUs", "nearly zero steady
state overhead" (docs/METHODS.md).

Costs (our reading): the step in flight is lost work; the recovery is a stall of detection +
the checkpoint write + restart + load (`method.restart_s` replaces detection + restart, as for
checkpoint-restart). The state written is the one every replica holds, so the loss curve is
the failure-free one, bit for bit.

When no healthy replica is left (every worker of the job fails at one instant; in a hybrid
layout, every data-parallel replica loses a GPU), nothing holds the state: the job restarts from
the last checkpoint there is, the previous just-in-time one, the optional periodic fall-back
(`method.fallback_every`, off by default: the design we model writes no checkpoint while
training runs) or the seeded initial state.

A fault that stops the whole job without destroying the replicas' GPU memory (a hang: an NCCL
watchdog timeout; failures/classes.py `progress`) leaves every replica healthy: the state is
written just in time from one of them, which is the paper's premise. A crash of every process
(`processes`, `all_but_storage`) leaves none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ..config import at_least
from ..failures.classes import REPLICA_GPU, STORAGE
from .rollback import RestartConfig, RollbackMethod
from .setting_roles import FALLBACK, role


@dataclass
class JitConfig(RestartConfig):
    charge_initial_checkpoint: bool = False  # the step-0 state is the seeded initialisation: nothing to write
    # a periodic checkpoint every this many steps, the fall-back when no healthy replica is left
    # (0: none, the design modelled here)
    fallback_every: int = field(default=0, metadata=role(FALLBACK, **at_least(0, "steps")))


class JustInTime(RollbackMethod):
    label = "JIT checkpointing"
    Config = JitConfig
    restores_from = (REPLICA_GPU, STORAGE)

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        if m.restart_on == "survivors" and cfg.parallel.tp * cfg.parallel.pp > 1:
            return "method.restart_on=survivors with JIT checkpointing is modelled in pure data parallelism only"
        return None

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.just_in_time = 0  # checkpoints written after a failure

    def setup(self) -> None:
        # after_step never writes, but the optional fall-back checkpoint
        self.interval = self.cfg.fallback_every or self.run.max_steps + 1

    def restart_after(self, workers: List[int]) -> None:
        job_fault = self.job_fault_source
        if (
            job_fault is not None
            and job_fault != REPLICA_GPU
            or job_fault is None
            and not self.healthy_replica(workers)
        ):
            return super().restart_after(workers)  # from the last checkpoint there is
        run, costs = self.run, self.run.costs
        write = costs.storage_write_s()
        run.clock.charge("stall", write)  # the job is stopped: the write is part of the recovery
        # a healthy replica's state is the run's own: written once this instant's events are handled
        self.store.save(run.step)
        self.just_in_time += 1
        run.event("checkpoint", detail={"step": run.step, "cost_s": write, "just_in_time": True})
        run.clock.charge("stall", self.restart_s() + costs.storage_read_s())
        run.restore(run.state_dict(), to_step=run.step, reason="failure", worker=workers[0])
        run.event("restart", workers[0], {"from_step": run.step, "source": "a healthy replica"})

    def healthy_replica(self, failed: List[int]) -> bool:
        """Whether a data-parallel replica that trained the step in flight lost no GPU."""
        placement = self.run.placement
        if placement is None:  # every computing worker is a replica; those the job ran without are not
            lost = set(failed) - set(self.running_without)
            return self.n - len(self.running_without) > len(lost)
        return len({placement.replica(w) for w in failed}) < placement.dp

    def summary(self):
        return {"checkpoint_interval": self.cfg.fallback_every or None, "just_in_time_checkpoints": self.just_in_time}

    def rollback_share(self, p_down: float) -> float:
        return 0.0  # a rollback beyond the step in flight needs every replica down at once
