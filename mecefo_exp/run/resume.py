"""Continuing a run folder (`resume=true`): which checkpoint, what it restores, which rows it supersedes.

A resume loads the newest complete checkpoint, the method's own or the harness's crash-safety
one (`trainer.resume_every`), restores the training state and the books, and moves the rows
written after that checkpoint (a killed segment's) to `superseded/resume-N/`, so that the
run's files read as one uninterrupted run. summary.json keeps one record per resume.

What the run started with is written once beside config.yaml, in start.json: the hash of its
settings (a resume refuses a config.yaml edited since, also when summary.json lost its copy),
the commit and the hash of the package's source (a resume with other code says so, and its
record keeps both).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..errors import ConfigError

log = logging.getLogger(__name__)

#: settings a resume may change: how the console reports, never what is computed or recorded
#: (not trainer.threads: a matmul's summation order, so its last bits, can depend on it); left
#: out of config_sha256, since the torchft launcher writes config.yaml again with them on a resume
RESUME_MAY_CHANGE = ("trainer.progress", "trainer.log_events")

#: what a run started with (config_sha256, git_sha, source_sha256, at): written once, at the start
START_NAME = "start.json"
#: the largest start.json read (a few hundred bytes in practice)
MAX_START_BYTES = 64 * 1024


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


def start_record(run_dir: Path) -> Dict:
    """The folder's start.json, {} when there is none to read (a run from before it, or not a run)."""
    from ..bounded_read import InputRefused, read_text_bounded

    try:
        record = json.loads(read_text_bounded(Path(run_dir) / START_NAME, MAX_START_BYTES))
    except (OSError, ValueError, InputRefused):
        return {}
    return record if isinstance(record, dict) else {}


def config_sha256(run_dir: Path, legacy: bool = False) -> Optional[str]:
    """The hash of the settings in the run's config.yaml, `resume` and the console's settings
    (RESUME_MAY_CHANGE) left out (`legacy`: only `resume`, as runs recorded it before). start.json
    and summary.json keep the start's; a resume refuses a config.yaml edited since. None when
    there is no readable config.yaml."""
    import yaml

    try:
        settings = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(settings, dict):
        return None
    settings.pop("resume", None)
    for key in () if legacy else RESUME_MAY_CHANGE:
        section, name = key.split(".")
        if isinstance(settings.get(section), dict):
            settings[section].pop(name, None)
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def code_identity() -> Dict[str, Optional[str]]:
    """The code this process runs: its commit (`-dirty` with uncommitted changes; None without
    git) and the hash of the package's source."""
    from .record import source_sha256

    return {"git_sha": _git_sha(), "source_sha256": source_sha256()}


@functools.lru_cache(maxsize=None)
def _git_sha() -> Optional[str]:
    from ..metrics import git_sha

    return git_sha()


def save_run_config(cfg, run_dir: Path, start: bool) -> None:
    """Write the run's resolved config (config.yaml: what a resume reuses) and, at the run's start,
    start.json beside it: the hash of those settings and the code that started the run."""
    from omegaconf import OmegaConf

    from ..metrics import write_json_atomic

    run_dir = Path(run_dir)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    if start:
        at = datetime.datetime.now().isoformat(timespec="seconds")
        write_json_atomic(run_dir / START_NAME, {"config_sha256": config_sha256(run_dir), **code_identity(), "at": at})


def recorded_config_sha256(run_dir: Path) -> Tuple[Optional[str], str]:
    """The hash of config.yaml the run recorded at its start, and where: start.json's, else (a run
    from before start.json) summary.json's; (None, "") when neither holds one."""
    for where, record in ((START_NAME, start_record(run_dir)), ("summary.json", previous_record(run_dir))):
        recorded = record.get("config_sha256")
        if isinstance(recorded, str) and recorded:
            return recorded, where
    return None, ""


def config_incomplete(run_dir: Path) -> Optional[str]:
    """The sections with no default that the run's config.yaml lacks, in one line (a record from
    before config_sha256 does not catch such an edit); None when none is missing."""
    import dataclasses

    from omegaconf import MISSING, OmegaConf

    from ..config.schema import Config

    stored = OmegaConf.load(Path(run_dir) / "config.yaml")
    missing = [f.name for f in dataclasses.fields(Config) if f.default is MISSING and f.name not in stored]
    return f"its config.yaml lacks {', '.join(missing)} (it is not the run's: put it back)" if missing else None


def config_edited(run_dir: Path) -> Optional[str]:
    """Why the run's config.yaml is not the one it started with (None when it is, or when the
    run recorded no hash of it: config_unchecked)."""
    recorded, where = recorded_config_sha256(run_dir)
    if recorded and recorded not in (config_sha256(run_dir), config_sha256(run_dir, legacy=True)):
        return (
            f"{Path(run_dir) / 'config.yaml'} was edited after the run started (its sha256 is not the "
            f"config_sha256 {where} recorded at the start, {recorded[:12]}...): put back the settings the run "
            "started with, or start a new run"
        )
    return None


def config_unchecked(run_dir: Path) -> Optional[str]:
    """A warning, in one line, when a resume cannot check config.yaml for edits: neither start.json
    nor summary.json holds the hash of the settings the run started with (a run from before the
    hash, or a record that lost it). None when it can."""
    recorded, _ = recorded_config_sha256(run_dir)
    if recorded:
        return None
    return (
        f"{Path(run_dir) / 'config.yaml'} cannot be checked for edits made since the run started: neither "
        f"{START_NAME} nor summary.json records its hash (a run from before them, or a record that lost it); "
        "the resume uses the file as it is"
    )


def earlier_run(run_dir: Path) -> Optional[Dict]:
    """What a run started in `run_dir` before left there: {"status": ok / failed / running /
    unknown, "resumable": a complete checkpoint to resume from}; None when the folder holds no
    run (new, empty, or only a config error recorded before any compute)."""
    from ..methods.checkpointing import complete_steps

    run_dir = Path(run_dir)
    started = ("config.yaml", START_NAME, "metrics.jsonl", "events.jsonl", "checkpoints", "resume")
    if not any((run_dir / name).exists() for name in started):
        return None
    status = previous_record(run_dir).get("status")
    return {
        "status": status if status in ("ok", "failed", "running") else "unknown",
        "resumable": (run_dir / "config.yaml").exists()
        and bool(complete_steps(run_dir / "checkpoints") or complete_steps(run_dir / "resume")),
    }


def _short(sha: Optional[str]) -> str:
    """A commit or source hash as a line names it: 12 hex digits (and `-dirty`), `unknown` for None."""
    if not sha:
        return "unknown"
    found = re.fullmatch(r"([0-9a-f]{12})[0-9a-f]*(-dirty)?", sha)
    return found[1] + (found[2] or "") if found else sha


def last_code(run_dir: Path, previous: Optional[Dict] = None) -> Dict[str, Optional[str]]:
    """The code the run's last segment ran: summary.json's git_sha and source_sha256 (each segment
    writes its own), else the last resume record's, else start.json's; a field it cannot tell is None."""
    previous = previous_record(run_dir) if previous is None else previous
    resumes = previous.get("resumes") if isinstance(previous.get("resumes"), list) else []
    last_resume = resumes[-1].get("code") if resumes and isinstance(resumes[-1], dict) else None
    sources = [previous, last_resume if isinstance(last_resume, dict) else {}, start_record(run_dir)]
    out: Dict[str, Optional[str]] = {}
    for key in ("git_sha", "source_sha256"):
        out[key] = next((s[key] for s in sources if isinstance(s.get(key), str) and s[key]), None)
    return out


def code_change(before: Dict[str, Optional[str]], now: Dict[str, Optional[str]]) -> Optional[str]:
    """What differs between two code identities, in a few words (only fields both know); None: the same."""
    changed = [
        f"{name} {_short(before.get(key))} -> {_short(now.get(key))}"
        for key, name in (("git_sha", "commit"), ("source_sha256", "package source sha256"))
        if before.get(key) and now.get(key) and before[key] != now[key]
    ]
    return "; ".join(changed) or None


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
    before, code = last_code(run_dir), code_identity()  # before this resume rewrites summary.json
    changed = code_change(before, code)
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
    if state is None or source is None:  # set together: the checkpoint that loaded and its store
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
        "code": code,
    }
    if changed:
        record["code_changed_from"] = before
        log.warning(
            "resume: this run last ran other code (%s): the steps after step %d run this code, so the run equals "
            "an uninterrupted one only if the change leaves what it computes alone (model, method, optimizer, data, "
            "clock); summary.json's resume record keeps both",
            changed,
            step,
        )
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
