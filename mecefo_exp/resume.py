"""Continuing a run folder (`resume=true`): which checkpoint, what it restores, which rows it supersedes.

A resume loads the newest complete checkpoint, the method's own or the harness's crash-safety
one (`trainer.resume_every`), restores the training state and the books, and moves the rows
written after that checkpoint (a killed segment's) to `superseded/resume-N/`, so that the
run's files read as one uninterrupted run. summary.json keeps one record per resume.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from .errors import ConfigError

log = logging.getLogger(__name__)


def previous_record(run_dir: Path) -> Dict:
    """The folder's summary.json as it is (before it is rewritten), {} when there is none to read."""
    try:
        record = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def previous_resumes(run_dir: Path) -> List[Dict]:
    """The resumes the folder's summary.json already records (before it is rewritten)."""
    resumes = previous_record(run_dir).get("resumes")
    return list(resumes) if isinstance(resumes, list) else []


def config_sha256(run_dir: Path) -> Optional[str]:
    """The hash of the settings in the run's config.yaml, `resume` left out (the torchft launcher
    writes it again with resume: true for its workers); summary.json keeps the start's, and a
    resume refuses a config.yaml edited since. None when there is no readable config.yaml."""
    import yaml

    try:
        settings = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(settings, dict):
        return None
    settings.pop("resume", None)
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def config_incomplete(run_dir: Path) -> Optional[str]:
    """The sections with no default that the run's config.yaml lacks, in one line (a record from
    before config_sha256 does not catch such an edit); None when none is missing."""
    import dataclasses

    from omegaconf import MISSING, OmegaConf

    from .config.schema import Config

    stored = OmegaConf.load(Path(run_dir) / "config.yaml")
    missing = [f.name for f in dataclasses.fields(Config) if f.default is MISSING and f.name not in stored]
    return f"its config.yaml lacks {', '.join(missing)} (it is not the run's: put it back)" if missing else None


def config_edited(run_dir: Path) -> Optional[str]:
    """Why the run's config.yaml is not the one it started with (None when it is, or when the
    record predates the hash)."""
    recorded = previous_record(run_dir).get("config_sha256")
    if recorded and recorded != config_sha256(run_dir):
        return (
            f"{Path(run_dir) / 'config.yaml'} was edited after the run started (its sha256 is not the "
            f"config_sha256 summary.json recorded, {str(recorded)[:12]}...): put back the settings the run "
            "started with, or start a new run"
        )
    return None


@dataclass
class ResumePoint:
    step: int
    wall_time_s: float  # the kept segments' wall time, summed: wall_time_s goes on from here
    record: Dict  # summary.json's entry for this resume


def resume_from_folder(
    run_dir: Path, method_name: str, store, resume_store, training, books, records, n_previous: int
) -> ResumePoint:
    """Restore the newest complete checkpoint into `training` and `books`; supersede later rows."""
    if store is None:
        raise ConfigError(f"resume=true: method={method_name} writes no checkpoints to resume from")
    steps = store.on_disk()
    harness_steps = resume_store.on_disk() if resume_store is not None else []
    if not steps and not harness_steps:
        raise ConfigError(f"resume=true but {store.root} holds no complete checkpoint")
    # newest first, the method's checkpoints and the harness's own (trainer.resume_every; on a tie the
    # method's); one that cannot be loaded (truncated, or not plain data) or does not fit this run
    # (another model size, method or layout) is skipped with a warning. A misfit may have loaded part
    # of the state: the next checkpoint loads all of it, and when none fits the run stops here.
    candidates = sorted([(s, 1, store) for s in steps] + [(s, 0, resume_store) for s in harness_steps], reverse=True)
    unreadable, state, source = [], None, None
    for step, _, candidate in candidates:
        try:
            loaded = candidate.load(step)
        except Exception as e:
            log.warning(
                "resume: %s cannot be loaded (%s); trying an older checkpoint", candidate.path(step), _reason(e)
            )
            unreadable.append((candidate, step))
            continue
        try:
            training.load_state_dict(loaded)
            books.load_state_dict(loaded["harness"])
        except Exception as e:
            log.warning(
                "resume: %s does not fit this run (%s); trying an older checkpoint", candidate.path(step), _reason(e)
            )
            unreadable.append((candidate, step))
            continue
        state, source = loaded, candidate
        break
    if state is None:
        raise ConfigError(f"resume=true: no checkpoint in {run_dir} can be loaded ({len(unreadable)} tried)")
    steps = [s for s in steps if (store, s) not in unreadable]
    harness_steps = [s for s in harness_steps if (resume_store, s) not in unreadable]
    step = state["step"]
    harness = state["harness"]
    store.saved = steps[-store.keep :]
    if resume_store is not None:
        resume_store.saved = harness_steps[-1:]
    n = n_previous + 1
    superseded: Dict[str, int] = {}
    if "records" in harness:  # rows written after the checkpoint belong to the discarded segment
        superseded = records.supersede(harness["records"], label=f"resume-{n}")
    else:
        log.warning("%s predates record lengths in checkpoints: rows after it are not cut", source.path(step))
    record = {
        "n": n,
        "at": datetime.datetime.now().isoformat(timespec="seconds"),
        "from_step": step,
        "checkpoint": str(source.path(step).relative_to(run_dir)),
        "sim_time_s": books.clock.now,
        "superseded_rows": superseded,
    }
    return ResumePoint(step=step, wall_time_s=harness.get("wall_time_s", 0.0), record=record)


def _reason(error: Exception) -> str:
    """An exception in one line: torch's load_state_dict lists every mismatch under a header line;
    the first one and how many follow."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if len(lines) > 1 and lines[0].endswith(":"):
        more = len(lines) - 2
        return lines[1] + (f" (and {more} more)" if more else "")
    return lines[0] if not isinstance(error, KeyError) else f"no {lines[0]} in it"


def checkpoint_path(run_dir: Path, record: Dict) -> Optional[Path]:
    return Path(run_dir) / record["checkpoint"] if record.get("checkpoint") else None
