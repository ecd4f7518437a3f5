"""REFT's in-memory snapshot: the training state sharded over the workers, each parity group's
shards protected by XOR parity, and its numerics-free ledger (methods/reft.py has the rules).
"""

from __future__ import annotations

import hashlib
import io
import math
import pickle
from typing import Dict, List, Optional

import numpy as np


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
        cut = [chain[s : s + group_size] for s in range(0, len(chain), group_size)]
        groups += cut
        holders += [cut[(k + 1) % len(cut)][0] if len(cut) > 1 else None for k in range(len(cut))]
    return groups, holders


class ShardedSnapshot:
    """One snapshot: the serialized state as n worker shards plus one XOR parity per group."""

    def __init__(
        self, payload: bytes, n_workers: int, group_size: int, step: int, chains: Optional[List[List[int]]] = None
    ):
        if n_workers < 1 or group_size < 2:
            raise ValueError(f"need n_workers >= 1 and group_size >= 2, got {n_workers}, {group_size}")
        self.step = step
        self.n = n_workers
        self.length = len(payload)
        self.shard_bytes = max(1, math.ceil(self.length / n_workers))
        padded = np.zeros(self.shard_bytes * n_workers, dtype=np.uint8)
        padded[: self.length] = np.frombuffer(payload, dtype=np.uint8)
        # each worker holds its own copy (no views into one buffer): losing one touches nothing else
        shards = [padded[w * self.shard_bytes : (w + 1) * self.shard_bytes].copy() for w in range(n_workers)]
        self.digests = [hashlib.sha1(s.tobytes()).digest() for s in shards]
        # parity of group k on the first worker of group k+1; None: the separate holder
        self.groups, self.parity_holder = parity_layout(n_workers, group_size, chains)
        self.parity: List[Optional[np.ndarray]] = [
            np.bitwise_xor.reduce(np.stack([shards[w] for w in g]), axis=0) for g in self.groups
        ]
        self.shards: List[Optional[np.ndarray]] = list(shards)  # None: a lost shard

    @classmethod
    def of_state(
        cls, state: Dict, n_workers: int, group_size: int, chains: Optional[List[List[int]]] = None
    ) -> "ShardedSnapshot":
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
        return {
            k: gone for k, gone in self.erasures().items() if len(gone) > 1 and any(b.startswith("shard") for b in gone)
        }

    def missing(self) -> List[int]:
        return [w for w in range(self.n) if self.shards[w] is None]

    def rebuild(self, worker: int) -> np.ndarray:
        """Shard `worker` from the survivors of its group and the parity, checked byte for byte."""
        k = self.group_of(worker)
        others = [w for w in self.groups[k] if w != worker]
        parity = self.parity[k]
        if parity is None or any(self.shards[w] is None for w in others):
            raise UnrecoverableSnapshot({k: self.erasures().get(k, [])})
        shard = parity.copy()
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
        return np.concatenate(parts).tobytes()[: self.length]

    def state(self) -> Dict:
        # the payload can come from a checkpoint file (a resumed run): tensors and plain values only
        import torch

        return torch.load(io.BytesIO(self.payload()), weights_only=True)

    def to_state(self) -> Dict:
        """Tensors and plain values (a checkpoint loads them with weights_only=True)."""
        import torch

        as_tensor = lambda a: None if a is None else torch.from_numpy(a.copy())
        return {
            "step": self.step,
            "n": self.n,
            "length": self.length,
            "shard_bytes": self.shard_bytes,
            "shards": [as_tensor(s) for s in self.shards],
            "digests": list(self.digests),
            "groups": [list(g) for g in self.groups],
            "parity_holder": list(self.parity_holder),
            "parity": [as_tensor(p) for p in self.parity],
        }

    @classmethod
    def from_state(cls, state: Dict) -> "ShardedSnapshot":
        snap = cls.__new__(cls)
        as_array = lambda t: None if t is None else t.numpy().copy()
        snap.step, snap.n, snap.length, snap.shard_bytes = (
            state["step"],
            state["n"],
            state["length"],
            state["shard_bytes"],
        )
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

    def __init__(
        self,
        payload: bytes,
        n_workers: int,
        step: int,
        groups: List[List[int]],
        holders: List[Optional[int]],
        group_of: Dict,  # ledger_index: worker -> its group, ("parity", worker) -> the groups of its parities
    ):
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
        return {
            k: gone for k, gone in self.erasures().items() if len(gone) > 1 and any(b.startswith("shard") for b in gone)
        }

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
        return {
            "ledger": True,
            "step": self.step,
            "n": self.n,
            "payload": self._payload,
            "groups": [list(g) for g in self.groups],
            "parity_holder": list(self.parity_holder),
            "lost_shards": sorted(self.lost_shards),
            "lost_parity": sorted(self.lost_parity),
        }

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
