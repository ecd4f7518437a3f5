"""BAFT: bubble-aware checkpointing (Frontiers of Computer Science 2025).

BAFT profiles the hybrid-parallel schedule and places checkpoint work inside the pipeline
bubbles, where the GPUs would idle anyway, so checkpoints can be frequent and rollbacks
short. In a hybrid layout (parallel.pp > 1) the bubble is the layout's own, (p - 1) pipeline
slots of the slowest stage (timing/layout.py), and method.stages/microbatches are not read.
Its benefit is structural to pipeline parallelism: in pure data parallelism our engine has
no bubble, so we only *model* one. A 1F1B schedule with p = `stages`
stages and m = `microbatches` micro-batches per flush idles a share
(p - 1) / (m + p - 1) of every step. We take that share of the failure-free step time as
the step's bubble (we do not lengthen the step: every method runs on the same engine),
and every `checkpoint_interval` steps write a real checkpoint (`CheckpointStore`), of which
the part that fits into the bubble of that step is free and the rest,
max(0, write - bubble), is charged as ft_overhead.

Recovery is checkpoint-restart's: on a failure the job stops (detection + restart + load,
the same stall), rolls back exactly to the last checkpoint and replays with a spare in the
failed worker's place, so the loss curve is the failure-free one, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict

from ..config import at_least
from ..plan import Plan
from .intervals import multiples_between, steps_before_multiple
from .rollback import RestartConfig, RollbackMethod
from .setting_roles import FREQUENT_SAVE, role


@dataclass
class BaftConfig(RestartConfig):
    # the bubble's checkpoint is its mechanism (its frequent save): no fall-back
    checkpoint_interval: int = field(default=5, metadata=role(FREQUENT_SAVE, **at_least(1, "steps")))
    stages: int = field(default=4, metadata=at_least(1))  # pipeline stages p of the modelled 1F1B schedule
    microbatches: int = field(default=8, metadata=at_least(1))  # micro-batches m per pipeline flush


class Baft(RollbackMethod):
    label = "BAFT"
    Config = BaftConfig

    @property
    def bubble_s(self) -> float:
        """Idle seconds per step: a hybrid layout's own bubble (each GPU writes its own shard in its
        own stage's idle slots), else the modelled stages x microbatches 1F1B schedule's."""
        return self.run.costs.bubble_s(self.cfg.stages, self.cfg.microbatches)

    @property
    def bubble_fraction(self) -> float:
        return self.bubble_s / self.run.costs.failure_free_step(self.n).total

    @property
    def checkpoint_charge_s(self) -> float:
        """What is left of a checkpoint write after the step's bubble has absorbed what it can."""
        return max(0.0, self.run.costs.storage_write_s() - self.bubble_s)

    def start(self) -> None:
        self.save_checkpoint(0, charge_s=self.checkpoint_charge_s)  # written in the first step's bubbles

    def after_step(self, step: int) -> None:
        if (step + 1) % self.interval == 0:
            self.save_checkpoint(step + 1, charge_s=self.checkpoint_charge_s)

    def quiet_steps(self, plan, step_s: float) -> int:
        """Its checkpoints change no later step but by their time, which the loop counts
        (`charged_in_quiet_run`): without numerics a quiet run goes past them and books them after
        its last step (`after_quiet_steps`), one loop pass for many checkpoints. With numerics each
        is written at its own step."""
        if self.run.numerics:
            return steps_before_multiple(plan.step, self.interval)  # its after_step writes on the interval only
        return self.run.max_steps - plan.step

    def charged_in_quiet_run(self, first: int, count: int) -> float:
        """The writes after steps `first`..`first + count - 2` (the one after the last step ends the
        run and delays none of its steps)."""
        return len(multiples_between(first + 1, first + count - 1, self.interval)) * self.checkpoint_charge_s

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        """The checkpoints of steps `first`..`last`, as `after_step` writes them after each, each
        stamped with the step and time it has in a step-by-step run (`step_s` seconds a step)."""
        for step in multiples_between(first + 1, last + 1, self.interval):
            self.save_checkpoint(step, charge_s=self.checkpoint_charge_s, booked_late_s=(last + 1 - step) * step_s)

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        if getattr(self.run, "costs", None) is None:  # failed before the cost model existed
            return out
        out.update(
            bubble_fraction=self.bubble_fraction,
            bubble_s=self.bubble_s,
            checkpoint_write_s=self.run.costs.storage_write_s(),
            checkpoint_charge_s=self.checkpoint_charge_s,
        )
        return out
