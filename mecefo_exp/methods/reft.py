"""REFT: in-memory snapshots, sharded over the workers, protected by XOR parity (arXiv 2310.12670).

A real implementation at small scale: every `snapshot_every` steps the whole training state is
sharded over the workers (methods/parity.py) with one XOR parity per group; a failure restarts the
job from memory, the lost shard rebuilt from its group's parity and checked byte for byte; two
erasures in one group fall back to the disk checkpoint. The snapshots live in host memory held by
processes of their own, so a fault that kills every training process but no host (a software
crash; failures/classes.py `processes`) or stops them (a hang, `progress`) loses no shard: the job
restarts from memory. Only a fault that takes the hosts' memory (`all_but_storage`) sends it to
disk. docs/METHODS.md ("REFT in the harness: the
rules") has the parity placement, the restart on the survivors and the costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from ..config import at_least, is_hybrid, within
from ..failures.classes import HOST_SNAPSHOT, STORAGE
from ..plan import Plan
from .intervals import multiples_between
from .parity import ShardedSnapshot, SnapshotLedger, ledger_index, parity_layout
from .rollback import RestartConfig, RollbackMethod
from .setting_roles import FALLBACK, FREQUENT_SAVE, role


@dataclass
class ReftConfig(RestartConfig):
    # steps between in-memory snapshots
    snapshot_every: int = field(default=5, metadata=role(FREQUENT_SAVE, **at_least(1, "steps")))
    # workers per XOR parity group (tolerates one loss per group)
    parity_group: int = field(default=4, metadata=at_least(2, "workers"))
    # disk checkpoints, the fallback when parity cannot help
    checkpoint_interval: Any = field(default="auto", metadata=role(FALLBACK))
    # share of the snapshot copy hidden behind compute (REFT is asynchronous)
    overlap: float = field(default=0.9, metadata=within(0, 1))


class Reft(RollbackMethod):
    """restart_on=survivors (a node trace, whose nodes never return): the snapshot is sharded over
    the survivors alone."""

    label = "REFT"
    Config = ReftConfig
    restores_from = (HOST_SNAPSHOT, STORAGE)

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        if m.restart_on == "survivors" and is_hybrid(cfg):
            return (
                "method.restart_on=survivors with REFT is modelled in pure data parallelism only "
                "(parallel.tp=1, parallel.pp=1)"
            )
        return None

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.snapshot: Optional[Union[ShardedSnapshot, SnapshotLedger]] = None  # a ledger without numerics
        self.counts = {"snapshots": 0, "memory_restores": 0, "shards_rebuilt": 0, "fatal": 0}
        self.heal_pending = False
        self.members: Optional[List[int]] = None  # survivors: the worker holding each shard (None: shard w on w)

    def setup(self) -> None:
        super().setup()
        every = self.cfg.snapshot_every
        # disk checkpoints only at snapshot steps: the fallback is never ahead of the memory state
        self.interval = every * math.ceil(self.interval / every)

    @property
    def snapshot_charge_s(self) -> float:
        return (1.0 - self.cfg.overlap) * self.run.costs.profile["state_copy"]

    def start(self) -> None:
        super().start()  # the disk checkpoint of step 0
        self.take_snapshot(0)

    def after_step(self, step: int) -> None:
        if (step + 1) % self.cfg.snapshot_every == 0:
            self.take_snapshot(step + 1)
        super().after_step(step)  # the disk checkpoint, every `interval` steps

    def charged_in_quiet_run(self, first: int, count: int) -> float:
        """The snapshots after steps `first`..`first + count - 2` (the one after the last step ends
        the run and delays none of its steps)."""
        return len(multiples_between(first + 1, first + count - 1, self.cfg.snapshot_every)) * self.snapshot_charge_s

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        """The snapshots of steps `first`..`last`, booked at once: the loop's quiet runs go from
        one disk checkpoint to the next, past the snapshot steps in between. Each snapshot is
        charged to the step before it and has its event, stamped with the step and time it has
        when taken after that step alone (`step_s` seconds a step); the last one stays. Without
        numerics (the only runs booked this way) the state of a step is its number alone."""
        state = self.run.state_dict()
        if set(state) != {"step"}:
            raise RuntimeError(f"quiet steps booked with training state ({sorted(state)}): snapshots need each step")
        for step in multiples_between(first + 1, last + 1, self.cfg.snapshot_every):
            self.snapshot = self._sharded({"step": step})
            self._book_snapshot(step, at_s_before_end=(last + 1 - step) * step_s)

    def take_snapshot(self, step: int) -> None:
        """Snapshot the state before step `step` into the workers' memory; charge its visible part."""
        if self.run.step != step:
            raise RuntimeError(f"snapshot of step {step} asked while the state is that of step {self.run.step}")
        self.snapshot = self._sharded(self.run.state_dict())
        self._book_snapshot(step)

    def _book_snapshot(self, step: int, at_s_before_end: Optional[float] = None) -> None:
        """A snapshot's visible cost (charged to the step before it), its count and its event
        (`at_s_before_end`: booked that many simulated seconds after it was taken)."""
        assert self.snapshot is not None
        cost = self.snapshot_charge_s
        if step > 0:
            self.run.clock.add_to_step(step - 1, "ft_overhead", cost)
        else:
            self.run.clock.charge("ft_overhead", cost)
        self.counts["snapshots"] += 1
        at = None if at_s_before_end is None else (step, self.run.clock.now - at_s_before_end)
        self.run.event(
            "snapshot",
            detail={
                "step": step,
                "cost_s": cost,
                "bytes": self.snapshot.length,
                "shard_bytes": self.snapshot.shard_bytes,
            },
            at=at,
        )

    def _sharded(self, state: Dict) -> Union[ShardedSnapshot, SnapshotLedger]:
        """The state as a snapshot over the workers that hold it: every worker, or on the
        survivors the workers up now (shard i on `members[i]`, groups of consecutive members)."""
        self.members = sorted(set(range(self.n)) - self.down) if self.on_survivors else None
        holders = len(self.members) if self.members is not None else self.n
        if self.run.numerics:
            return ShardedSnapshot.of_state(state, holders, self.cfg.parity_group, self.chains)
        return SnapshotLedger.of_state(state, holders, self._ledger_layout(holders))

    def _ledger_layout(self, holders: int):
        """The parity layout and its index, built once per number of holders (O(workers))."""
        layouts = self.__dict__.setdefault("_layouts", {})
        if holders not in layouts:
            groups, parity = parity_layout(holders, self.cfg.parity_group, self.chains)
            layouts[holders] = (groups, parity, ledger_index(groups, parity))
        return layouts[holders]

    def _shard_of(self, worker: int) -> Optional[int]:
        if self.members is None:
            return worker
        return self.members.index(worker) if worker in self.members else None  # joined since: holds no shard

    def restart_after(self, workers: List[int]) -> None:
        """Workers of one instant (a whole server) lose their shards together; then one restart,
        from memory if every parity group lost at most one block, else from disk."""
        worker, snap = workers[0], self.snapshot
        if self.job_fault_source == HOST_SNAPSHOT and snap is not None:  # every shard survived in host memory
            self.restart_from_memory(worker, [])
        elif snap is None:
            self._fatal(worker, {"reason": "no in-memory snapshot since the last disk fallback"})
        else:
            shards = [i for i in map(self._shard_of, workers) if i is not None]
            lost = [block for i in shards for block in snap.lose(i)]
            bad = snap.unrecoverable()
            if bad:
                self._fatal(
                    worker,
                    {
                        "reason": "more than one erasure in a parity group",
                        "groups": bad,
                        "snapshot_step": snap.step,
                        "lost": lost,
                    },
                )
            else:
                self.restart_from_memory(worker, lost)

    def restart_from_memory(self, worker: int, lost: List[str]) -> None:
        """Restart every worker, rebuild the lost shards from parity, restore the snapshot."""
        cc, costs, snap = self.run.cluster_cfg, self.run.costs, self.snapshot
        assert snap is not None  # restart_after called this with the snapshot it holds
        self.run.clock.charge("stall", costs.stall_s(cc.detection_s + cc.restart_s) + costs.profile["state_copy"])
        rebuilt = snap.missing()
        state = snap.state()  # rebuilds every missing shard, each checked against its digest
        self.heal_pending = True  # the spares get their shards when the job runs again
        self.counts["memory_restores"] += 1
        self.counts["shards_rebuilt"] += len(rebuilt)
        self.run.restore(state, to_step=snap.step, reason="failure", worker=worker)
        self.run.event(
            "restart", worker, {"from_step": snap.step, "source": "memory", "lost": lost, "rebuilt_shards": rebuilt}
        )

    def _fatal(self, worker: int, detail: Dict) -> None:
        """Parity cannot help: restart from the disk checkpoint and drop the snapshot."""
        self.counts["fatal"] += 1
        self.run.event("fatal", worker, detail)
        self.snapshot = None
        if self.store.latest_step() > self.run.step:  # setup() keeps disk steps a subset of snapshot steps
            raise RuntimeError(f"disk checkpoint of step {self.store.latest_step()} is ahead of step {self.run.step}")
        self.restart_from_checkpoint(worker, reason="fatal")

    def on_failures(self, workers: List[int]) -> None:
        super().on_failures(workers)
        if self.job_empty:  # no node is left (on the survivors): the failures of this instant emptied the job
            # the snapshot lived in the memory of workers that are all gone: the next start is from disk
            self.snapshot, self.heal_pending = None, False
            self.counts["fatal"] += 1

    def plan(self, step: int):
        if self.heal_pending and self.snapshot is not None:
            if self.on_survivors:  # no spare: the rebuilt state is re-sharded over the survivors
                self.snapshot = self._sharded(self.snapshot.state())
            else:  # the spares get the rebuilt shards; lost parity is re-encoded
                self.snapshot.heal()
        self.heal_pending = False
        return super().plan(step)

    def state_dict(self) -> Dict[str, object]:
        # the snapshot lives in the workers' memory, not on disk; a resumed run must still
        # hold it (a later failure restores from it), so the checkpoint carries it as it is
        # (lost shards included), at the cost of a second copy of the state on disk
        return {**super().state_dict(), "snapshot": self.snapshot.to_state() if self.snapshot is not None else None}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        state = dict(state)
        snapshot = state.pop("snapshot", None)
        if snapshot is None or isinstance(snapshot, (ShardedSnapshot, SnapshotLedger)):
            self.snapshot = snapshot
        else:
            assert isinstance(snapshot, dict), type(snapshot)  # to_state()'s dict, as a checkpoint holds it
            self.snapshot = (SnapshotLedger if snapshot.get("ledger") else ShardedSnapshot).from_state(snapshot)
        super().load_state_dict(state)

    def rollback_share(self, p_down: float) -> float:
        """Recovery heals the code at once, so a disk rollback needs two losses in one
        group within one restart stall: negligible; the disk keeps only step 0."""
        return 0.0

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        out.update(self.counts)
        out.update(snapshot_every=self.cfg.snapshot_every, parity_group=self.cfg.parity_group)
        if getattr(self.run, "costs", None) is not None:
            out["snapshot_charge_s"] = self.snapshot_charge_s
        groups, holders = parity_layout(self.n, self.cfg.parity_group, self.chains)
        out.update(parity_groups=groups, parity_holders=holders)
        return out

    @property
    def chains(self) -> Optional[List[List[int]]]:
        """In a hybrid layout, parity groups run across replicas (the GPUs of one slot hold the
        same weights, and a server failure takes one of them): each (stage, tensor rank) slot's
        GPUs in replica order. Consecutive GPUs would share a server, whose loss erases two
        shards of one group: every failure would be fatal."""
        placement = self.run.placement
        return None if placement is None else placement.replica_chains()
