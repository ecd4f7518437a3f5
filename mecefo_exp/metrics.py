"""The run record: jsonl files appended line by line, summary.json written atomically.

The file names and fields are the contract that analysis/ relies on (docs/DESIGN.md).
wandb is optional: with `logger=wandb` the same rows are mirrored there, and nothing
breaks if the package or a key is missing (offline mode needs no key). W&B's own step
only grows, and a rollback replays steps, so rows are logged without `step=` (W&B counts
them) and plotted against `train/step` (define_metric): every execution of a step is
kept, as in metrics.jsonl, with `train/execution` telling a replay (2, 3, ...) from the first.
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
        self._executions: Dict[int, int] = {}  # step -> times executed (replays after rollbacks)
        self._event_counts: Dict[str, int] = {}
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
            n = self._executions[row["step"]] = self._executions.get(row["step"], 0) + 1
            self._wandb.log({**_numbers("train", row), "train/execution": n})

    def eval(self, row: Dict[str, Any]) -> None:
        self._append("eval", row)
        if self._wandb is not None:
            self._wandb.log(_numbers("eval", row))

    def event(self, row: Dict[str, Any]) -> None:
        self._append("events", row)
        if self._wandb is not None:
            # a running count per kind (fail, rollback, restart, ...), plotted against the step
            kind = row["kind"]
            self._event_counts[kind] = self._event_counts.get(kind, 0) + 1
            extra = {"events/lost_steps": row["detail"].get("lost_steps", 0)} if kind == "rollback" else {}
            self._wandb.log({"events/step": row["step"], "events/sim_time_s": row["sim_time_s"],
                             f"events/{kind}": self._event_counts[kind], **extra})

    def write_json(self, name: str, data: Dict[str, Any]) -> None:
        if self.enabled:
            write_json_atomic(self.dir / name, data)

    def summary(self, data: Dict[str, Any]) -> None:
        self.write_json("summary.json", data)
        if self._wandb is not None and data.get("status") != "running":
            self._wandb.summary.update(_flatten(_clean(data)))  # time_breakdown/compute, clock/..., ...

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _numbers(prefix: str, row: Dict[str, Any]) -> Dict[str, float]:
    return {f"{prefix}/{k}": v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} | \
        {f"{prefix}/{k}": int(v) for k, v in row.items() if isinstance(v, bool)}


def _flatten(data: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def wandb_group_and_tags(logger_cfg, config: Optional[dict]):
    """group: logger.group, else the sweep's folder name in a multirun (one W&B group per sweep);
    tags: method, failure and model, plus logger.tags."""
    group = logger_cfg.group
    if group is None:
        try:
            from hydra.core.hydra_config import HydraConfig
            from hydra.types import RunMode

            hc = HydraConfig.get()
            if hc.mode == RunMode.MULTIRUN:
                group = Path(hc.sweep.dir).name
        except (ImportError, ValueError):  # not under @hydra.main (tests, notebooks)
            pass
    cfg = config or {}
    tags = [f"{key}={cfg[key]['name']}" for key in ("method", "failure", "model") if key in cfg]
    return group, tags + [t for t in (logger_cfg.tags or []) if t not in tags]


def _start_wandb(logger_cfg, config, run_dir: Path):
    try:
        import wandb
    except ImportError:
        log.warning("logger=wandb but the wandb package is not installed: pip install -r requirements-optional.txt; "
                    "logging to files only")
        return None
    group, tags = wandb_group_and_tags(logger_cfg, config)
    try:
        run = wandb.init(project=logger_cfg.project, entity=logger_cfg.entity, mode=logger_cfg.mode,
                         config=config, dir=str(run_dir), name=run_dir.name, group=group, tags=tags)
    except Exception as e:  # a missing key in online mode must not kill a training run
        log.warning("wandb.init failed (%s); logging to files only", e)
        return None
    for section in ("train", "eval", "events"):
        run.define_metric(f"{section}/step")
        run.define_metric(f"{section}/*", step_metric=f"{section}/step")
    return run
