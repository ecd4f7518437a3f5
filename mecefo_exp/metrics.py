"""The run record: jsonl files appended line by line, summary.json written atomically.

The file names and fields are the contract that analysis/ relies on (docs/DESIGN.md).
wandb is optional: with `logger=wandb` the same rows are mirrored there, and nothing
breaks if the package or a key is missing (offline mode needs no key).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Optional

log = logging.getLogger(__name__)


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(_clean(data), f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def git_sha() -> Optional[str]:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def drop_torn_line(path: Path) -> None:
    """Cut a last line that has no newline (the process died while writing it)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(keep)
    log.warning("%s: dropped a torn last line (%d bytes) left by a killed run", path, len(data) - keep)


class RunRecords:
    """Writers for one run folder; only one process (rank 0) owns it."""

    def __init__(self, run_dir: Path, logger_cfg=None, config: Optional[dict] = None, enabled: bool = True):
        self.dir = Path(run_dir)
        self.enabled = enabled
        self._files = {}
        self._wandb = None
        if not enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in ("metrics", "eval", "events"):
            path = self.dir / f"{name}.jsonl"
            drop_torn_line(path)  # a run killed mid-write and resumed must not glue two rows together
            self._files[name] = open(path, "a", buffering=1)
        if logger_cfg is not None and logger_cfg.name == "wandb":
            self._wandb = _start_wandb(logger_cfg, config, self.dir)

    def _append(self, name: str, row: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        f = self._files[name]
        f.write(json.dumps(_clean(row)) + "\n")
        f.flush()

    def metric(self, row: Dict[str, Any]) -> None:
        self._append("metrics", row)
        if self._wandb is not None:
            self._wandb.log({f"train/{k}": v for k, v in row.items() if isinstance(v, (int, float))}, step=row["step"])

    def eval(self, row: Dict[str, Any]) -> None:
        self._append("eval", row)
        if self._wandb is not None:
            self._wandb.log({f"eval/{k}": v for k, v in row.items() if isinstance(v, (int, float))}, step=row["step"])

    def event(self, row: Dict[str, Any]) -> None:
        self._append("events", row)

    def write_json(self, name: str, data: Dict[str, Any]) -> None:
        if self.enabled:
            write_json_atomic(self.dir / name, data)

    def summary(self, data: Dict[str, Any]) -> None:
        self.write_json("summary.json", data)
        if self._wandb is not None and data.get("status") != "running":
            self._wandb.summary.update({k: v for k, v in _clean(data).items() if not isinstance(v, dict)})

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _start_wandb(logger_cfg, config, run_dir: Path):
    try:
        import wandb
    except ImportError:
        log.warning("logger=wandb but the wandb package is not installed: pip install wandb; logging to files only")
        return None
    try:
        return wandb.init(project=logger_cfg.project, entity=logger_cfg.entity, mode=logger_cfg.mode,
                          config=config, dir=str(run_dir), name=run_dir.name)
    except Exception as e:  # a missing key in online mode must not kill a training run
        log.warning("wandb.init failed (%s); logging to files only", e)
        return None
