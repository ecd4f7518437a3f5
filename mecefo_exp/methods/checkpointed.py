"""The family of methods that keep disk checkpoints and restart from one: every method here, for
its own recovery or as the fall-back when its mechanism cannot help.

Its settings (`CheckpointedConfig`), the checkpoint write that a failure may cut, the interval
(steps or Daly's optimum), the restart from the latest checkpoint, and when a recovered worker
joins: at once, or at the next restart or re-formation (`hold_back`, `admit_waiting`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..config import MethodConfig, at_least, choices
from ..plan import Plan
from .base import Method
from .checkpointing import CheckpointStore, store_of_run
from .intervals import daly_interval, steps_before_multiple
from .setting_roles import CHECKPOINT_INTERVAL


@dataclass
class CheckpointedConfig(MethodConfig):
    """What every method that keeps disk checkpoints reads (each adds its `checkpoint_interval`:
    steps or "auto" for Daly's optimum; setting_roles.py says which settings a study may set)."""

    backend: str = field(default="torch", metadata=choices("torch", "dcp"))  # torch.save | torch.distributed.checkpoint
    keep: int = field(default=2, metadata=at_least(1, "checkpoints kept"))
    # seconds of a job restart from the checkpoint (None: cluster.detection_s + cluster.restart_s)
    restart_s: Optional[float] = field(default=None, metadata=at_least(0, "seconds (null: the cluster's)"))
    charge_initial_checkpoint: bool = True  # false: the step-0 state (the seeded initialisation) costs no write
    # sync: a failure during a checkpoint's write cuts it, the checkpoint does not stand (Daly's
    # model) | async: the state is copied to memory at once and persisted behind training, so a
    # failure during the persist leaves the checkpoint standing
    checkpoint_write: str = field(default="sync", metadata=choices("sync", "async"))
    checkpoint_after_failure: bool = False  # also checkpoint after the first step of a restart (Varuna does)


class CheckpointedMethod(Method):
    """A method that keeps disk checkpoints (a real `CheckpointStore`) and can roll back to one:
    every method here, for its own recovery or as the fall-back when its mechanism cannot help.

    `interval` is in steps or "auto" (Young/Daly). A rollback stops the whole job: detection +
    restart + load, then replay from the saved step.
    """

    Config = CheckpointedConfig
    store: CheckpointStore

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.store = store_of_run(run, keep=cfg.keep, backend=cfg.backend)
        self.waiting: List[int] = []  # recovered workers that join at the next restart or re-formation
        self.interval = 0
        self.checkpoint_due = False  # a checkpoint after the first step of a restart (checkpoint_after_failure)
        self.last_write = (0, 0.0, 0.0)
        self.writes_cut = 0  # checkpoint writes a failure cut (checkpoint_write=sync)

    def setup(self) -> None:
        self.interval = self.resolve_interval(self.cfg[CHECKPOINT_INTERVAL])

    def resolve_interval(self, value) -> int:
        """Daly's higher-order optimum (intervals.py), C = checkpoint write time, M = the mean time
        between the failures that need this checkpoint (cluster MTBF / rollback_share)."""
        if value != "auto":
            return int(value)
        write_s = self.run.costs.storage_write_s()
        share = self.rollback_share(self.run.expected_down_fraction())
        mtbf_s = self.run.cluster_mtbf_s() / share if share > 0 else math.inf
        step_s = self.run.costs.failure_free_step(self.n).total
        if not math.isfinite(mtbf_s):
            return self.run.max_steps  # no rollback expected: only the initial checkpoint
        return max(1, min(self.run.max_steps, round(daly_interval(write_s, mtbf_s) / step_s)))

    def rollback_share(self, p_down: float) -> float:
        """Share of failures that roll back to the disk checkpoint, given the probability
        p_down that some other worker is down at the time. Checkpoint-restart: all of them;
        methods that survive failures in place override this with their fatal share."""
        return 1.0

    def start(self) -> None:
        # the initial state is the seeded initialisation: a preset may say it costs no write
        self.save_checkpoint(step=0, charge_s=None if self.cfg.charge_initial_checkpoint else 0.0)

    def restart_s(self) -> float:
        """A job restart: method.restart_s where the method states it, else detection + restart."""
        own = self.cfg.restart_s
        cc = self.run.cluster_cfg
        return self.run.costs.stall_s(cc.detection_s + cc.restart_s if own is None else own)

    def job_start_s(self) -> float:
        own = self.cfg.restart_s
        return super().job_start_s() if own is None else self.run.costs.stall_s(own)

    def save_checkpoint(self, step: int, charge_s: Optional[float] = None, booked_late_s: float = 0.0) -> None:
        """Write a real checkpoint of the state before step `step`; charge its time.

        The time is charged first, so that the clock saved in the checkpoint (for resuming
        a killed run) already holds it. `booked_late_s`: booked that many simulated seconds after
        it was taken (the checkpoints inside a numerics-free quiet run, booked after its last step):
        it began, and its event is stamped, that much earlier, and it keeps the state of its step.
        """
        cost = self.run.costs.storage_write_s() if charge_s is None else charge_s
        began = self.run.clock.now - booked_late_s
        self.last_write = (step, began, cost)  # which checkpoint, when its write began, how long
        if step > 0 and self.write_cut_by_failure(step, cost, began):
            return
        if step > 0:
            self.run.clock.add_to_step(step - 1, "ft_overhead", cost)
        else:
            self.run.clock.charge("ft_overhead", cost)
        late = booked_late_s > 0
        self.store.save(step, state={**self.run.state_dict(), "step": step} if late else None)
        at = (step, began + cost) if late else None
        self.run.event("checkpoint", detail={"step": step, "cost_s": cost}, at=at)

    def write_cut_by_failure(self, step: int, cost: float, now: float) -> bool:
        """A synchronous write (begun at `now`) that a failure falls inside is cut: the time up to
        the failure is spent (on the step it follows, so a rollback past it makes it lost work),
        nothing is saved, and the failure is handled at its own time. A replay of another simulator
        (method.variant) keeps that simulator's checkpoint rules."""
        t_fail = self.run.trace.next_failure_time()
        if (
            self.cfg.checkpoint_write != "sync"
            or self.cfg.get("variant")
            or t_fail is None
            or not now <= t_fail < now + cost
        ):
            return False
        self.run.clock.add_to_step(step - 1, "ft_overhead", t_fail - now)
        self.writes_cut += 1
        self.run.event("checkpoint", detail={"step": step, "cost_s": t_fail - now, "cut": True})
        return True

    def after_step(self, step: int) -> None:
        if (step + 1) % self.interval == 0 or self.checkpoint_due:
            self.checkpoint_due = False
            self.save_checkpoint(step + 1)

    def quiet_steps(self, plan: Plan, step_s: float) -> int:
        """Quiet until the next step that ends on a multiple of the interval (its checkpoint)."""
        return 0 if self.checkpoint_due else steps_before_multiple(plan.step, self.interval)

    def summary(self) -> Dict[str, object]:
        return {"checkpoint_interval": self.interval, "checkpoint_writes_cut": self.writes_cut}

    # ---- when a recovered worker rejoins: at once, or at the next restart or re-formation
    def hold_back(self, worker: int, waits: bool, detail: Dict[str, object]) -> bool:
        """`worker` is back: when it `waits` for the next restart or re-formation to join
        (restart_on=survivors, Oobleck's admit_nodes=next_reconfiguration), keep it out until then
        (`admit_held_back`) and say so; False: it joins now."""
        if not waits:
            return False
        self.waiting.append(worker)
        self.run.event("waiting", worker, detail)
        return True

    def admit_held_back(self, failed: List[int]) -> None:
        """At a restart or re-formation caused by `failed`: the workers held back join it."""
        admit_waiting(self.down, self.waiting, failed)

    def restart_from_checkpoint(self, worker: int, reason: str) -> None:
        self.run.clock.charge("stall", self.restart_s() + self.run.costs.storage_read_s())
        self.checkpoint_due = self.cfg.checkpoint_after_failure
        saved = self.store.latest_step()
        self.run.restore(self.store.load(saved), to_step=saved, reason=reason, worker=worker)
        self.run.event("restart", worker, {"from_step": saved})


def admit_waiting(down: set, waiting: List[int], failed: List[int]) -> None:
    """At a restart or re-formation caused by `failed`, the recovered workers that waited for one
    (Varuna's job morphing, REFT on the survivors, Oobleck's admit_nodes=next_reconfiguration) are
    up again: removed from `down` and `waiting`, in place. A worker removed again while it
    waited never joins."""
    down -= set(waiting) - set(failed)
    waiting.clear()
