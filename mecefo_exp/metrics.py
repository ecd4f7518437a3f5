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

#: record fields measured on this machine's wall clock: they differ between two runs of one
#: configuration (and between a resumed run and the uninterrupted one); everything else is exact
WALL_CLOCK_FIELDS = ("wall_time_s", "tflops_s", "mfu", "achieved_tflops_s")


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _dumps(row: Dict[str, Any]) -> str:
    """One jsonl line: a row without NaN or inf (nearly all) is encoded as it is; one with them is cleaned
    first. The same text as json.dumps(_clean(row)) (tuples become lists either way), without walking
    every row of a long run through _clean."""
    try:
        return json.dumps(row, allow_nan=False)
    except ValueError:
        return json.dumps(_clean(row))


def write_json_atomic(path: Path, data: Dict[str, Any]) -> None:
    """Temp file + fsync + rename: the file is the old one or the new one, never half of one.

    A failed write (a full disk: ENOSPC at write or at fsync) removes the temp file and raises.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(_clean(data), f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_last_resort(path: Path, data: Dict[str, Any]) -> None:
    """Overwrite in place, compactly, fsync best-effort: for a failure record on a full disk.

    The atomic write needs room for a second copy; truncating the old file first frees its
    blocks, so the (shorter) failure record usually still fits where the atomic one did not.
    """
    with open(path, "w") as f:
        f.write(json.dumps(_clean(data)) + "\n")
        f.flush()
        try:
            os.fsync(f.fileno())
        except OSError:
            pass


def git_sha() -> Optional[str]:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
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
    """Writers for one run folder; only one process (rank 0) owns it.

    Streams are `<name>.jsonl` files appended a line at a time and flushed, so the bytes
    of every row written are in the file (the page cache) whatever kills the process.
    `sizes()` are the streams' lengths at a checkpoint; a resume cuts each stream back to
    them (`supersede`), so rows of the discarded segment are never counted twice.
    """

    STREAMS = ("metrics", "eval", "events")  # opened at once; others (grad_error) when first written

    def __init__(self, run_dir: Path, logger_cfg=None, config: Optional[dict] = None, enabled: bool = True):
        self.dir = Path(run_dir)
        self.enabled = enabled
        self._files: Dict[str, Any] = {}  # stream name -> its open file
        self._wandb = None
        self._executions: Dict[int, int] = {}  # step -> times executed (replays after rollbacks)
        self._event_counts: Dict[str, int] = {}
        if not enabled:
            return
        self._open_streams()
        if logger_cfg is not None and logger_cfg.name == "wandb":
            self._wandb = _start_wandb(logger_cfg, config, self.dir)

    def _open_streams(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.dir.glob("*.jsonl")):
            drop_torn_line(path)  # a run killed mid-write and resumed must not glue two rows together
        for name in self.STREAMS:
            self._open(name)

    def take_over(self) -> None:
        """This process now owns the folder (torchft: the writer before it was killed)."""
        if not self.enabled:
            self.enabled = True
            self._open_streams()

    def _open(self, name: str):
        f = self._files[name] = open(self.dir / f"{name}.jsonl", "a", buffering=1)
        return f

    def append(self, name: str, row: Dict[str, Any]) -> None:
        if not self.enabled:
            return
        f = self._files.get(name) or self._open(name)
        f.write(_dumps(row) + "\n")
        f.flush()

    def sizes(self) -> Dict[str, int]:
        """Bytes in each stream now (after an fsync, so that a machine crash keeps them too)."""
        if not self.enabled:
            return {}
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
        return {p.name: p.stat().st_size for p in sorted(self.dir.glob("*.jsonl"))}

    def supersede(self, sizes: Dict[str, int], label: str) -> Dict[str, int]:
        """Cut every stream back to `sizes` (a stream absent there: to nothing).

        The cut rows are the discarded segment of a killed run: they are kept, out of the
        way of analysis, in superseded/<label>/<name>.jsonl. Returns rows moved per stream.
        """
        moved: Dict[str, int] = {}
        if not self.enabled:
            return moved
        for f in self._files.values():
            f.flush()
        for path in sorted(self.dir.glob("*.jsonl")):
            keep = sizes.get(path.name, 0)
            size = path.stat().st_size
            if size < keep:
                log.warning(
                    "%s is shorter (%d bytes) than when the checkpoint was written (%d): rows were lost",
                    path,
                    size,
                    keep,
                )
                continue
            if size == keep:
                continue
            with open(path, "r+b") as f:
                f.seek(keep)
                tail = f.read()
                side = self.dir / "superseded" / label / path.name
                side.parent.mkdir(parents=True, exist_ok=True)
                side.write_bytes(tail)
                f.truncate(keep)
            moved[path.name] = tail.count(b"\n")
        return moved

    def metric(self, row: Dict[str, Any]) -> None:
        self.append("metrics", row)
        if self._wandb is not None:
            n = self._executions[row["step"]] = self._executions.get(row["step"], 0) + 1
            self._wandb.log({**_numbers("train", row), "train/execution": n})

    def eval(self, row: Dict[str, Any]) -> None:
        self.append("eval", row)
        if self._wandb is not None:
            self._wandb.log(_numbers("eval", row))

    def event(self, row: Dict[str, Any]) -> None:
        self.append("events", row)
        if self._wandb is not None:
            # a running count per kind (fail, rollback, restart, ...), plotted against the step
            kind = row["kind"]
            self._event_counts[kind] = self._event_counts.get(kind, 0) + 1
            extra = {"events/lost_steps": row["detail"].get("lost_steps", 0)} if kind == "rollback" else {}
            self._wandb.log(
                {
                    "events/step": row["step"],
                    "events/sim_time_s": row["sim_time_s"],
                    f"events/{kind}": self._event_counts[kind],
                    **extra,
                }
            )

    def write_json(self, name: str, data: Dict[str, Any]) -> None:
        if self.enabled:
            write_json_atomic(self.dir / name, data)

    def summary(self, data: Dict[str, Any]) -> None:
        self.write_json("summary.json", data)
        if self._wandb is not None and data.get("status") != "running":
            self._wandb.summary.update(flatten(_clean(data)))  # time_breakdown/compute, clock/..., ...

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _numbers(prefix: str, row: Dict[str, Any]) -> Dict[str, float]:
    return {f"{prefix}/{k}": v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)} | {
        f"{prefix}/{k}": int(v) for k, v in row.items() if isinstance(v, bool)
    }


def flatten(data: Dict[str, Any], prefix: str = "", sep: str = "/") -> Dict[str, Any]:
    """Nested dicts as one level: {"a": {"b": 1}} -> {"a/b": 1} (W&B's summary keys; `sep="."`
    gives Hydra's dotted keys)."""
    out: Dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}{sep}", sep))
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
        log.warning(
            "logger=wandb but the wandb package is not installed: pip install -r requirements-optional.txt; "
            "logging to files only"
        )
        return None
    group, tags = wandb_group_and_tags(logger_cfg, config)
    try:
        run = wandb.init(
            project=logger_cfg.project,
            entity=logger_cfg.entity,
            mode=logger_cfg.mode,
            config=config,
            dir=str(run_dir),
            name=run_dir.name,
            group=group,
            tags=tags,
        )
    except Exception as e:  # a missing key in online mode must not kill a training run
        log.warning("wandb.init failed (%s); logging to files only", e)
        return None
    for section in ("train", "eval", "events"):
        run.define_metric(f"{section}/step")
        run.define_metric(f"{section}/*", step_metric=f"{section}/step")
    return run
