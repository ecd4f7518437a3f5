"""REFT: in-memory snapshots, sharded over the workers, protected by XOR parity (arXiv 2310.12670).

A real implementation at small scale.

Snapshot. Every `snapshot_every` steps the whole training state (model, optimizer,
scheduler, step, RNG: `Experiment.state_dict()`) is serialized to bytes with torch.save
(which copies the live tensors), padded to a multiple of n and split into n equal shards;
worker w holds shard w in its (CPU) memory. Workers form parity groups of
`parity_group` consecutive workers ({0..g-1}, {g..2g-1}, ...; the last group may be
smaller); each group's parity is the XOR of its shards. A SHA-1 digest of every shard is
kept with the snapshot's metadata so that a rebuilt shard is checked byte for byte.

In a hybrid layout (parallel.tp/pp > 1) the groups are cut along each (stage, tensor rank) slot's
GPUs in replica order instead (`Reft.chains`), so that one server's loss erases one shard per group.

Parity placement (ours; REFT spreads parity RAID-5 style). The parity of group k is held
by a worker *outside* the group: the first worker of the next group (k+1 mod the number
of groups), so one node loss costs its own group one data shard and another group its
parity. With a single group (n <= parity_group) no worker lies outside it, and the parity
is held by a separate snapshot-management holder that does not fail (REFT keeps snapshots
in separate processes; here they would have to live on a host outside the failure trace).

Failure of worker j. The job restarts (detection + restart, the same stall as
checkpoint-restart, through `costs.stall_s`), but loads from memory: j's shard is lost
(deleted, and any parity it held with it), rebuilt from the surviving shards of its
group and the group's parity, checked against its digest, the state is reassembled,
deserialized and restored with `run.restore`, and the steps since the snapshot are
replayed with a spare in j's place. The load is charged as the profiled `state_copy`
kernel instead of a storage read. Recovery re-protects the snapshot: when training
resumes, the spare receives the rebuilt shard and a lost parity is re-encoded (`heal`), as
REFT re-distributes after a node loss, so a later failure finds a whole code again. Two
erasures in one group before that (a second failure inside the restart stall, or a shard
and the worker holding its parity) are more than XOR can correct: then we log a `fatal` event and fall back to the disk checkpoint
(`RollbackMethod`, written every `checkpoint_interval` steps, rounded up to a multiple of
`snapshot_every` so that the disk checkpoint is never ahead of the in-memory state); the
in-memory snapshot is dropped.

With `restart_on=survivors` (a node trace, where no node ever comes back) there is no spare: the
job restarts on the workers still up, the global batch re-split over them, and the rebuilt
snapshot is re-sharded over them (groups of consecutive survivors); each later snapshot is
sharded over the workers up when it is taken. Pure data parallelism only.

Cost. A snapshot costs the profiled `state_copy` kernel (a device -> host copy of the
model and optimizer state), of which a share `overlap` is hidden behind the next steps'
compute (REFT snapshots asynchronously); the rest, (1 - overlap) * state_copy, is charged
as ft_overhead to the step after which the snapshot is taken. We charge the full state
copy although each REFT worker copies only its 1/n shard: the slack stands for the
encoding and the shard exchange, which are not profiled separately.
"""

from __future__ import annotations

import hashlib
import io
import math
import pickle
from typing import Dict, List, Optional

import numpy as np

from dataclasses import dataclass, field
from typing import Any

from ..config import at_least, is_hybrid, within
from .base import RestartConfig, RollbackMethod, steps_before_multiple


class UnrecoverableSnapshot(RuntimeError):
    """More erasures in a parity group than XOR parity can correct."""

    def __init__(self, groups: Dict[int, List[str]]):
        super().__init__(f"parity groups {sorted(groups)} lost more than one block: {groups}")
        self.groups = groups


def parity_layout(n_workers: int, group_size: int, chains: Optional[List[List[int]]] = None):
    """Groups of `group_size` workers cut in order along each chain (default: one chain of every
    worker, so groups of consecutive workers) and, per group, the worker holding its parity: the
    first of the next group of the same chain (None: a chain of one group, a separate holder)."""
    groups: List[List[int]] = []
    holders: List[Optional[int]] = []
    for chain in chains or [list(range(n_workers))]:
        cut = [chain[s:s + group_size] for s in range(0, len(chain), group_size)]
        groups += cut
        holders += [cut[(k + 1) % len(cut)][0] if len(cut) > 1 else None for k in range(len(cut))]
    return groups, holders


class ShardedSnapshot:
    """One snapshot: the serialized state as n worker shards plus one XOR parity per group."""

    def __init__(self, payload: bytes, n_workers: int, group_size: int, step: int,
                 chains: Optional[List[List[int]]] = None):
        if n_workers < 1 or group_size < 2:
            raise ValueError(f"need n_workers >= 1 and group_size >= 2, got {n_workers}, {group_size}")
        self.step = step
        self.n = n_workers
        self.length = len(payload)
        self.shard_bytes = max(1, math.ceil(self.length / n_workers))
        padded = np.zeros(self.shard_bytes * n_workers, dtype=np.uint8)
        padded[:self.length] = np.frombuffer(payload, dtype=np.uint8)
        # each worker holds its own copy (no views into one buffer): losing one touches nothing else
        self.shards: List[Optional[np.ndarray]] = [
            padded[w * self.shard_bytes:(w + 1) * self.shard_bytes].copy() for w in range(n_workers)]
        self.digests = [hashlib.sha1(s.tobytes()).digest() for s in self.shards]
        # parity of group k on the first worker of group k+1; None: the separate holder
        self.groups, self.parity_holder = parity_layout(n_workers, group_size, chains)
        self.parity: List[Optional[np.ndarray]] = [
            np.bitwise_xor.reduce(np.stack([self.shards[w] for w in g]), axis=0) for g in self.groups]

    @classmethod
    def of_state(cls, state: Dict, n_workers: int, group_size: int,
                 chains: Optional[List[List[int]]] = None) -> "ShardedSnapshot":
        import torch

        buf = io.BytesIO()
        torch.save(state, buf)  # serializing copies the live tensors
        return cls(buf.getvalue(), n_workers, group_size, int(state["step"]), chains)

    def group_of(self, worker: int) -> int:
        return next(k for k, g in enumerate(self.groups) if worker in g)

    def lose(self, worker: int) -> List[str]:
        """Worker `worker` is gone and its memory with it: its shard and any parity it held."""
        lost = []
        if self.shards[worker] is not None:
            self.shards[worker] = None
            lost.append(f"shard {worker}")
        for k, holder in enumerate(self.parity_holder):
            if holder == worker and self.parity[k] is not None:
                self.parity[k] = None
                lost.append(f"parity {k}")
        return lost

    def erasures(self) -> Dict[int, List[str]]:
        """Per parity group, the blocks (data shards, parity) that are gone."""
        out = {}
        for k, g in enumerate(self.groups):
            gone = [f"shard {w}" for w in g if self.shards[w] is None]
            if self.parity[k] is None:
                gone.append(f"parity {k}")
            if gone:
                out[k] = gone
        return out

    def unrecoverable(self) -> Dict[int, List[str]]:
        """Groups that lost a data shard and cannot rebuild it (two or more erasures)."""
        return {k: gone for k, gone in self.erasures().items()
                if len(gone) > 1 and any(b.startswith("shard") for b in gone)}

    def missing(self) -> List[int]:
        return [w for w in range(self.n) if self.shards[w] is None]

    def rebuild(self, worker: int) -> np.ndarray:
        """Shard `worker` from the survivors of its group and the parity, checked byte for byte."""
        k = self.group_of(worker)
        others = [w for w in self.groups[k] if w != worker]
        if self.parity[k] is None or any(self.shards[w] is None for w in others):
            raise UnrecoverableSnapshot({k: self.erasures().get(k, [])})
        shard = self.parity[k].copy()
        for w in others:
            np.bitwise_xor(shard, self.shards[w], out=shard)
        if hashlib.sha1(shard.tobytes()).digest() != self.digests[worker]:
            raise RuntimeError(f"rebuilt shard {worker} of the step-{self.step} snapshot does not match its digest")
        return shard

    def payload(self) -> bytes:
        """The serialized state, rebuilding the missing shards (the holders stay empty)."""
        bad = self.unrecoverable()
        if bad:
            raise UnrecoverableSnapshot(bad)
        parts = [s if s is not None else self.rebuild(w) for w, s in enumerate(self.shards)]
        return np.concatenate(parts).tobytes()[:self.length]

    def state(self) -> Dict:
        # the payload can come from a checkpoint file (a resumed run): tensors and plain values only
        import torch

        return torch.load(io.BytesIO(self.payload()), weights_only=True)

    def to_state(self) -> Dict:
        """Tensors and plain values (a checkpoint loads them with weights_only=True)."""
        import torch

        as_tensor = (lambda a: None if a is None else torch.from_numpy(a.copy()))
        return {"step": self.step, "n": self.n, "length": self.length, "shard_bytes": self.shard_bytes,
                "shards": [as_tensor(s) for s in self.shards], "digests": list(self.digests),
                "groups": [list(g) for g in self.groups], "parity_holder": list(self.parity_holder),
                "parity": [as_tensor(p) for p in self.parity]}

    @classmethod
    def from_state(cls, state: Dict) -> "ShardedSnapshot":
        snap = cls.__new__(cls)
        as_array = (lambda t: None if t is None else t.numpy().copy())
        snap.step, snap.n, snap.length, snap.shard_bytes = state["step"], state["n"], state["length"], state["shard_bytes"]
        snap.shards = [as_array(s) for s in state["shards"]]
        snap.digests = list(state["digests"])
        snap.groups = [list(g) for g in state["groups"]]
        snap.parity_holder = list(state["parity_holder"])
        snap.parity = [as_array(p) for p in state["parity"]]
        return snap

    def heal(self) -> None:
        """Give spares their rebuilt shards and re-encode lost parity: the code is whole again."""
        for w in self.missing():
            self.shards[w] = self.rebuild(w)
        for k, g in enumerate(self.groups):
            if self.parity[k] is None:
                parity = self.shards[g[0]].copy()
                for w in g[1:]:
                    np.bitwise_xor(parity, self.shards[w], out=parity)
                self.parity[k] = parity


class SnapshotLedger:
    """A numerics-free run's snapshot: the same erasure bookkeeping as ShardedSnapshot, without
    the bytes. The state is kept whole (numerics off it is the harness's counters and a shape-only
    model, kilobytes) and which shards and parities are gone is a set per group, so a snapshot costs
    O(1) and a loss O(the parities it held), not O(workers): at 16,384 workers a sharded
    snapshot takes ~0.1 s here, every `snapshot_every` steps. The decisions (restore from memory,
    or fall back to disk) are ShardedSnapshot's: the same layout, the same erasure rule."""

    def __init__(self, payload: bytes, n_workers: int, step: int, groups: List[List[int]],
                 holders: List[Optional[int]], group_of: Dict[int, int]):
        self.step, self.n, self.length = step, n_workers, len(payload)
        self.shard_bytes = max(1, math.ceil(self.length / n_workers))
        self._payload = payload
        self.groups, self.parity_holder, self._group_of = groups, holders, group_of
        self.lost_shards: set = set()
        self.lost_parity: set = set()

    @classmethod
    def of_state(cls, state: Dict, n_workers: int, layout) -> "SnapshotLedger":
        # numerics off the state holds no tensors (counters, assignments): pickled, and only ever
        # unpickled by this process, so a numerics-free run never loads a tensor library for it
        return cls(pickle.dumps(state), n_workers, int(state["step"]), *layout)

    def lose(self, worker: int) -> List[str]:
        lost = []
        if worker not in self.lost_shards:
            self.lost_shards.add(worker)
            lost.append(f"shard {worker}")
        for k in self._group_of.get(("parity", worker), ()):
            if k not in self.lost_parity:
                self.lost_parity.add(k)
                lost.append(f"parity {k}")
        return lost

    def erasures(self) -> Dict[int, List[str]]:
        out: Dict[int, List[str]] = {}
        for w in sorted(self.lost_shards):
            out.setdefault(self._group_of[w], []).append(f"shard {w}")
        for k in sorted(self.lost_parity):
            out.setdefault(k, []).append(f"parity {k}")
        return dict(sorted(out.items()))

    def unrecoverable(self) -> Dict[int, List[str]]:
        return {k: gone for k, gone in self.erasures().items()
                if len(gone) > 1 and any(b.startswith("shard") for b in gone)}

    def missing(self) -> List[int]:
        return sorted(self.lost_shards)

    def state(self) -> Dict:
        bad = self.unrecoverable()
        if bad:
            raise UnrecoverableSnapshot(bad)
        return pickle.loads(self._payload)

    def heal(self) -> None:
        self.lost_shards.clear()
        self.lost_parity.clear()

    def to_state(self) -> Dict:
        return {"ledger": True, "step": self.step, "n": self.n, "payload": self._payload,
                "groups": [list(g) for g in self.groups], "parity_holder": list(self.parity_holder),
                "lost_shards": sorted(self.lost_shards), "lost_parity": sorted(self.lost_parity)}

    @classmethod
    def from_state(cls, state: Dict) -> "SnapshotLedger":
        groups, holders = [list(g) for g in state["groups"]], list(state["parity_holder"])
        payload = state["payload"]
        payload = payload if isinstance(payload, bytes) else payload.numpy().tobytes()  # a tensor: an older record
        snap = cls(payload, state["n"], state["step"], groups, holders, ledger_index(groups, holders))
        snap.lost_shards, snap.lost_parity = set(state["lost_shards"]), set(state["lost_parity"])
        return snap


def ledger_index(groups: List[List[int]], holders: List[Optional[int]]) -> Dict:
    """worker -> its group, and ("parity", worker) -> the groups whose parity it holds."""
    index: Dict = {w: k for k, g in enumerate(groups) for w in g}
    for k, holder in enumerate(holders):
        if holder is not None:
            index.setdefault(("parity", holder), []).append(k)
    return index


@dataclass
class ReftConfig(RestartConfig):
    snapshot_every: int = field(default=5, metadata=at_least(1, "steps"))  # steps between in-memory snapshots
    # workers per XOR parity group (tolerates one loss per group)
    parity_group: int = field(default=4, metadata=at_least(2, "workers"))
    checkpoint_interval: Any = "auto"  # disk checkpoints, the fallback when parity cannot help
    # share of the snapshot copy hidden behind compute (REFT is asynchronous)
    overlap: float = field(default=0.9, metadata=within(0, 1))


class Reft(RollbackMethod):
    """restart_on=survivors (a node trace, whose nodes never return): the snapshot is sharded over
    the survivors alone."""

    name = "reft"
    label = "REFT"
    Config = ReftConfig

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        if m.restart_on == "survivors" and is_hybrid(cfg):
            return ("method.restart_on=survivors with REFT is modelled in pure data parallelism only "
                    "(parallel.tp=1, parallel.pp=1)")
        return None

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.snapshot: Optional[ShardedSnapshot] = None
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

    def steady_steps(self, plan, step_s: float) -> Optional[int]:
        """Quiet until the next snapshot or disk checkpoint."""
        return min(steps_before_multiple(plan.step, self.cfg.snapshot_every), super().steady_steps(plan, step_s))

    def take_snapshot(self, step: int) -> None:
        """Snapshot the state before step `step` into the workers' memory; charge its visible part."""
        if self.run.step != step:
            raise RuntimeError(f"snapshot of step {step} asked while the state is that of step {self.run.step}")
        self.snapshot = self._sharded(self.run.state_dict())
        cost = self.snapshot_charge_s
        if step > 0:
            self.run.clock.add_to_step(step - 1, "ft_overhead", cost)
        else:
            self.run.clock.charge("ft_overhead", cost)
        self.counts["snapshots"] += 1
        self.run.event("snapshot", detail={"step": step, "cost_s": cost, "bytes": self.snapshot.length,
                                           "shard_bytes": self.snapshot.shard_bytes})

    def _sharded(self, state: Dict):
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
        if snap is None:
            self._fatal(worker, {"reason": "no in-memory snapshot since the last disk fallback"})
        else:
            shards = [i for i in map(self._shard_of, workers) if i is not None]
            lost = [block for i in shards for block in snap.lose(i)]
            bad = snap.unrecoverable()
            if bad:
                self._fatal(worker, {"reason": "more than one erasure in a parity group", "groups": bad,
                                     "snapshot_step": snap.step, "lost": lost})
            else:
                self.restart_from_memory(worker, lost)

    def restart_from_memory(self, worker: int, lost: List[str]) -> None:
        """Restart every worker, rebuild the lost shards from parity, restore the snapshot."""
        cc, costs, snap = self.run.cluster_cfg, self.run.costs, self.snapshot
        self.run.clock.charge("stall", costs.stall_s(cc.detection_s + cc.restart_s) + costs.profile["state_copy"])
        rebuilt = snap.missing()
        state = snap.state()  # rebuilds every missing shard, each checked against its digest
        self.heal_pending = True  # the spares get their shards when the job runs again
        self.counts["memory_restores"] += 1
        self.counts["shards_rebuilt"] += len(rebuilt)
        self.run.restore(state, to_step=snap.step, reason="failure", worker=worker)
        self.run.event("restart", worker, {"from_step": snap.step, "source": "memory", "lost": lost,
                                           "rebuilt_shards": rebuilt})

    def _fatal(self, worker: int, detail: Dict) -> None:
        """Parity cannot help: restart from the disk checkpoint and drop the snapshot."""
        self.counts["fatal"] += 1
        self.run.event("fatal", worker, detail)
        self.snapshot = None
        if self.store.latest_step() > self.run.step:  # setup() keeps disk steps a subset of snapshot steps
            raise RuntimeError(f"disk checkpoint of step {self.store.latest_step()} is ahead of step {self.run.step}")
        self.restart_from_checkpoint(worker, reason="fatal")

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
