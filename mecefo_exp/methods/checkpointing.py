"""Disk checkpoints of the full training state, saved and loaded for real.

A checkpoint holds the model, optimizer and scheduler state, the torch RNG state and the
step (the sample stream is a pure function of the step, so the step *is* the data
position). Backends: `torch` (torch.save, one file) or `dcp`
(torch.distributed.checkpoint, a folder of shards; single-process here, the same API
writes one shard per rank under torchrun).

Without numerics (trainer.numerics=false) a checkpoint holds only the step and lives in
memory: the clock still charges the write, nothing is written.

A method decides *when* to checkpoint (`save`, inside its after_step); the bytes are
written when the trainer calls `flush()` at the end of that step boundary, after every
other piece of end-of-step work (the method's own, an evaluation), so that the harness's
books in the checkpoint are those of the top of the next step: a run resumed from it
replays nothing and misses nothing. The training state does not change in between, so
a rollback to it loads what the method saved. Old checkpoints are deleted only after the
new one is whole on disk (written to a temp file, fsynced, renamed); a failed write
removes its temp file.

A torch.save checkpoint has its SHA-256 beside it (`step_<n>.sha256`, written before the checkpoint
is renamed into place) and checked when it is loaded: a file whose bytes changed on disk (a flipped
bit, an edit) is refused as `CheckpointCorrupt`, which a resume treats as an unreadable checkpoint
(the next older one is tried). A checkpoint without its checksum (written by an older version)
loads unchecked; a dcp folder is not covered.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional

CHECKSUM_SUFFIX = ".sha256"


class CheckpointCorrupt(RuntimeError):
    """A checkpoint's bytes are not those written: its SHA-256 does not match the one saved with it."""


def complete_steps(root: Path) -> List[int]:
    """Steps of the complete checkpoints under `root`: a torch.save file is renamed from its
    .tmp only when whole; a dcp folder is whole once its .metadata is written."""
    if not Path(root).exists():
        return []
    return sorted(
        int(p.stem.split("_")[1])
        for p in Path(root).glob("step_*")
        if (p.is_file() and p.suffix not in (".tmp", CHECKSUM_SUFFIX)) or (p.is_dir() and (p / ".metadata").exists())
    )


class _Hashing:
    """A binary file that hashes what is written to it (torch.save writes through it)."""

    def __init__(self, f):
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def verify_checksum(target: Path) -> None:
    """Raise CheckpointCorrupt when `target` has a saved SHA-256 that its bytes no longer match."""
    saved = target.with_suffix(CHECKSUM_SUFFIX)
    if not saved.is_file():
        return  # written before checksums: loaded unchecked
    expected = saved.read_text(encoding="ascii", errors="replace").split()[0:1]
    actual = file_sha256(target)
    if expected != [actual]:
        raise CheckpointCorrupt(
            f"checksum mismatch: SHA-256 {actual[:16]}... differs from the "
            f"{(expected or ['(empty)'])[0][:16]}... saved in {saved.name} (the file changed on disk)"
        )


class CheckpointStore:
    """Checkpoints under `root`, the newest `keep` of them; it knows nothing of the run but what it
    is handed: `state_dict(harness=...)` the state to save, `writes()` whether this process is the
    one that writes (ranks hold identical replicas), `barrier()` how to wait for the others."""

    def __init__(
        self,
        root: Path,
        state_dict: Callable[..., Dict],
        *,
        in_memory: bool = False,
        writes: Callable[[], bool] = lambda: True,
        barrier: Callable[[], None] = lambda: None,
        keep: int = 2,
        backend: str = "torch",
    ):
        if backend not in ("torch", "dcp"):
            raise ValueError(f"method.backend={backend!r}: allowed: torch, dcp")
        self.state_dict = state_dict
        self.writes = writes
        self.barrier = barrier
        self.keep = max(1, keep)
        self.backend = backend
        self.root = Path(root)
        self.saved: List[int] = []
        self.in_memory = in_memory
        self._memory: Dict[int, Dict] = {}
        self.pending: Optional[int] = None  # saved, to be written by flush()

    def path(self, step: int) -> Path:
        return self.root / (f"step_{step:07d}" + (".pt" if self.backend == "torch" else ""))

    def save(self, step: int, state: Optional[Dict] = None) -> None:
        """Keep the state before step `step` (written at the boundary's flush). `state`: that state
        where it is not the live one (in memory only: a numerics-free run's quiet run of steps books
        the checkpoints inside it after its last step)."""
        if step in self.saved:
            self.saved.remove(step)
        self.saved.append(step)
        if self.in_memory:
            self._memory[step] = self.state_dict() if state is None else state
            while len(self.saved) > self.keep:
                self._memory.pop(self.saved.pop(0), None)
            return
        self.pending = step
        del self.saved[: -self.keep]

    def flush(self) -> bool:
        """Write the checkpoint saved at this step boundary, then drop the ones beyond `keep`."""
        if self.pending is None:
            return False
        step, self.pending = self.pending, None
        self._write(step)
        if self.writes():
            for old in self.on_disk():
                if old not in self.saved:
                    self._delete(old)
        return True

    def _write(self, step: int) -> None:
        import torch

        self.root.mkdir(parents=True, exist_ok=True)
        state = self.state_dict(harness=True)  # the harness's books too: a killed run resumes
        target = self.path(step)
        if self.backend == "torch":
            if self.writes():  # ranks hold identical replicas: rank 0 writes, all read
                tmp = target.with_suffix(".tmp")
                checksum = target.with_suffix(CHECKSUM_SUFFIX)
                checksum_tmp = checksum.with_suffix(CHECKSUM_SUFFIX + ".tmp")
                try:
                    with open(tmp, "wb") as f:
                        hashing = _Hashing(f)
                        torch.save(state, hashing)
                        f.flush()
                        os.fsync(f.fileno())  # a full disk says so here, not after the rename
                    with open(checksum_tmp, "w", encoding="ascii") as f:
                        f.write(f"{hashing.sha.hexdigest()}  {target.name}\n")
                        f.flush()
                        os.fsync(f.fileno())
                    checksum_tmp.replace(checksum)  # before the checkpoint: no checkpoint is seen without it
                    tmp.replace(target)  # a checkpoint is either whole or absent
                except RuntimeError as e:  # torch's zip writer hides ENOSPC behind "enforce fail at inline_container"
                    full = shutil.disk_usage(self.root).free < (1 << 20)
                    tmp.unlink(missing_ok=True)
                    checksum_tmp.unlink(missing_ok=True)
                    if full:
                        raise OSError(errno.ENOSPC, f"No space left on device writing {target}") from e
                    raise
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    checksum_tmp.unlink(missing_ok=True)
                    raise
            self.barrier()
        else:
            import torch.distributed.checkpoint as dcp

            if target.exists():
                shutil.rmtree(target)
            try:
                dcp.save(state, checkpoint_id=str(target))
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)  # no .metadata: never counted as complete
                raise

    def _delete(self, step: int) -> None:
        old = self.path(step)
        shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
        old.with_suffix(CHECKSUM_SUFFIX).unlink(missing_ok=True)

    def clean_incomplete(self) -> List[str]:
        """Remove what a killed run left half-written (temp files, dcp folders without metadata)."""
        removed: List[str] = []
        if not self.root.exists() or not self.writes():
            return removed
        for p in sorted(self.root.glob("step_*")):
            if p.suffix == ".tmp" or (p.is_dir() and not (p / ".metadata").exists()):
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
                removed.append(p.name)
        return removed

    def on_disk(self) -> List[int]:
        """Steps of the complete checkpoints in the folder."""
        return complete_steps(self.root)

    def latest_step(self) -> int:
        if not self.saved:
            raise RuntimeError("no checkpoint has been written yet")
        return self.saved[-1]

    def load(self, step: int) -> Dict:
        self.flush()  # a rollback to the checkpoint of this very boundary: write it first
        if self.in_memory:
            return self._memory[step]
        import torch  # a file on disk: numerics on

        target = self.path(step)
        if self.backend == "torch":
            verify_checksum(target)  # a changed byte is refused, not trained on
            # tensors and plain values only: a run folder copied from elsewhere cannot run code here
            return torch.load(target, weights_only=True)
        import torch.distributed.checkpoint as dcp

        state = self.state_dict(harness=True)  # dcp loads in place into a state dict of the right shape
        dcp.load(state, checkpoint_id=str(target))
        return state


def store_of_run(run, folder: str = "checkpoints", keep: int = 2, backend: str = "torch") -> CheckpointStore:
    """A store of `run`'s state in `run_dir/folder` (without numerics: the step, in memory); the
    process that writes the run record writes the files."""
    return CheckpointStore(
        Path(run.run_dir) / folder,
        run.state_dict,
        in_memory=not run.numerics,
        writes=lambda: run.is_main,
        barrier=run.barrier,
        keep=keep,
        backend=backend,
    )
