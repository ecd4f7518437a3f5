"""Disk checkpoints of the full training state, saved and loaded for real.

A checkpoint holds the model, optimizer and scheduler state, the torch RNG state and the
step (the sample stream is a pure function of the step, so the step *is* the data
position). Backends: `torch` (torch.save, one file) or `dcp`
(torch.distributed.checkpoint, a folder of shards; single-process here, the same API
writes one shard per rank under torchrun).

Without numerics (trainer.numerics=false) a checkpoint holds only the step and lives in
memory: the clock still charges the write, nothing is written.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List

import torch


class CheckpointStore:
    def __init__(self, run, keep: int = 2, backend: str = "torch"):
        if backend not in ("torch", "dcp"):
            raise ValueError(f"method.backend={backend!r}: allowed: torch, dcp")
        self.run = run
        self.keep = max(1, keep)
        self.backend = backend
        self.root = Path(run.run_dir) / "checkpoints"
        self.saved: List[int] = []
        self.in_memory = not run.numerics
        self._memory: Dict[int, Dict] = {}

    def path(self, step: int) -> Path:
        return self.root / (f"step_{step:07d}" + (".pt" if self.backend == "torch" else ""))

    def save(self, step: int) -> None:
        if self.in_memory:
            self._memory[step] = self.run.state_dict()
        else:
            self._write(step)
        if step in self.saved:
            self.saved.remove(step)
        self.saved.append(step)
        while len(self.saved) > self.keep:
            self._forget(self.saved.pop(0))

    def _write(self, step: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        state = self.run.state_dict(harness=True)  # the harness's books too: a killed run resumes
        target = self.path(step)
        if self.backend == "torch":
            if self.run.is_main:  # ranks hold identical replicas: rank 0 writes, all read
                tmp = target.with_suffix(".tmp")
                torch.save(state, tmp)
                tmp.replace(target)  # a checkpoint is either whole or absent
            self.run.barrier()
        else:
            import torch.distributed.checkpoint as dcp

            if target.exists():
                shutil.rmtree(target)
            dcp.save(state, checkpoint_id=str(target))

    def _forget(self, step: int) -> None:
        if self.in_memory:
            self._memory.pop(step, None)
            return
        old = self.path(step)
        if self.run.is_main:
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)

    def on_disk(self) -> List[int]:
        """Steps of the complete checkpoints in the folder (a torch.save is renamed when whole)."""
        if not self.root.exists():
            return []
        steps = []
        for p in self.root.glob("step_*"):
            if p.suffix == ".tmp":
                continue
            if self.backend == "dcp" and not (p / ".metadata").exists():
                continue
            steps.append(int(p.stem.split("_")[1]))
        return sorted(steps)

    def latest_step(self) -> int:
        if not self.saved:
            raise RuntimeError("no checkpoint has been written yet")
        return self.saved[-1]

    def load(self, step: int) -> Dict:
        if self.in_memory:
            return self._memory[step]
        target = self.path(step)
        if self.backend == "torch":
            return torch.load(target, weights_only=False)
        import torch.distributed.checkpoint as dcp

        state = self.run.state_dict(harness=True)  # dcp loads in place into a state dict of the right shape
        dcp.load(state, checkpoint_id=str(target))
        return state
