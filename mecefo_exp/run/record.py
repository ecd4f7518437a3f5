"""What a run says about itself: summary.json from its parts, the failure record, the start lines.

summary.json is assembled from the parts that exist so far (a run that dies while building
still leaves `failed` with what it knew): the run's identity and progress, the books
(counters, time breakdown, trace expectations), the training state (data fingerprint,
parameters, achieved FLOP/s), the clock, the method and the tier.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import logging
from pathlib import Path
from typing import Dict, Optional

from ..metrics import write_json_last_resort
from ..signals import Terminated, signals_held

log = logging.getLogger(__name__)


def clock_summary(timing, costs, hardware_cfg, n_workers: int) -> Dict:
    """What summary.json says about the clock: which, its fingerprint, FLOPs, MFU, memory."""
    step = costs.failure_free_step(n_workers)
    flops = normal = timing.counts["mb:normal"]["flops"]
    if "layout" in timing.info:  # a GPU of a hybrid layout does 1/(tp x pp) of m micro-batches
        flops = timing.info["layout"]["flops_per_gpu_step"]
    peak = hardware_cfg.peak_tflops * 1e12
    out = dict(timing.info)
    out.update(
        n_params_timed=timing.n_params,
        failure_free_step_s=step.total,
        flops_per_worker_step=flops,
        paper_time=hardware_cfg.paper_time,
        implied_mfu=flops / (step.total * peak) if step.total > 0 else None,
        flop_ratio_neighbour_normal=next(
            (c["flops"] / normal for k, c in timing.counts.items() if k.startswith("neighbor_pair")), None
        ),
    )
    return out


def record_failure(records, summary_of_failure, error: BaseException, run_dir: Path) -> None:
    """Leave summary.json `failed` with the reason, even on a full disk."""
    if records is None or not records.enabled:
        return
    text = f"{type(error).__name__}: {error}"
    try:
        data = summary_of_failure(text)
    except Exception as inner:  # the books may be half-built: say at least what happened
        data = {"status": "failed", "error": text, "summary_error": repr(inner), "run_dir": str(run_dir)}
    path = Path(run_dir) / "summary.json"
    try:
        records.summary(data)
    except OSError:  # no room for the atomic copy: overwrite in place, which frees the old blocks first
        try:
            write_json_last_resort(path, data)
        except OSError as last:
            log.error("cannot record the failure in %s: %s", path, last)
    try:
        records.close()
    except OSError:
        pass


def close_a_record_left_behind(tier, records, record_failure) -> Optional[BaseException]:
    """After a process that does not write the record failed: if the writer is gone too (torchrun:
    rank 0's machine, or the rendezvous host), the first rank of each machine left closes the record
    as failed. Returns the end to raise instead (None: the writer is there)."""
    left = None
    with contextlib.suppress(Terminated), signals_held():  # torchrun's agent stopping this rank waits
        left = tier.record_left_behind()
        if left is not None and tier.closes_a_left_record:
            records.take_over()
            record_failure(left)
    return left


def log_start(
    logger: logging.Logger, cfg, trace, timing, costs, training, max_steps: int, tokens_per_step: int
) -> None:
    """The run's first lines: what trains, on which clock, under which failures."""
    n_workers = cfg.cluster.n_workers
    exp, info = trace.expected, timing.info
    step_s = costs.failure_free_step(n_workers).total
    logger.info(
        "%s: %s, %d workers, %.2fM parameters, %d steps of %d tokens, %s",
        cfg.method.name,
        cfg.model.name,
        n_workers,
        training.n_params / 1e6,
        max_steps,
        tokens_per_step,
        training.describe_data(max_steps),
    )
    eff = f", efficiency {info['efficiency']:.3f} ({info['efficiency_source']})" if "efficiency" in info else ""
    logger.info(
        "clock: hardware=%s, %s compute, timing %s: failure-free step %.4g s%s; fingerprint %s",
        info["hardware"],
        info["compute"],
        info["timed_model"],
        step_s,
        eff,
        info["fingerprint"],
    )
    if "layout" in info:
        lay = info["layout"]
        logger.info(
            "layout: tp%d x pp%d x dp%d, %s with %d micro-batches: pipeline %.4g s (bubble %.1f%%), stages of "
            "%s layers",
            lay["tp"],
            lay["pp"],
            lay["dp"],
            lay["schedule"],
            lay["microbatches"],
            lay["pipeline_s"],
            100 * lay["bubble_fraction"],
            "/".join(map(str, sorted(set(lay["stage_layers"])))),
        )
    logger.info(
        "failure=%s: expected %.1f failures and %.2f workers down on average over the failure-free run "
        "(%.1f simulated s)",
        cfg.failure.name,
        exp["failures"],
        exp["mean_workers_down"],
        step_s * max_steps,
    )
    if exp["failures"] > max_steps:
        # The paper's rates are per paper hour, and the whole run is cluster.paper_run_h paper
        # hours long: a short run packs the same failures into few steps, and a method whose
        # recovery outlasts the gap between failures (a restart) keeps failing while it
        # recovers (failure=high, 1 step, checkpoint: 254 failures).
        logger.warning(
            "failure=%s: %.1f failures expected in %d steps (more than one per step): failure rates are "
            "per paper hour and the run stands for cluster.paper_run_h=%g paper hours whatever its length, "
            "so a short run is mostly failures and recoveries; use more steps or failure=none",
            cfg.failure.name,
            exp["failures"],
            max_steps,
            cfg.cluster.paper_run_h,
        )


def warn_if_memory_does_not_fit(logger: logging.Logger, timing) -> None:
    mem = timing.memory
    if not all(mem["fits"].get(k, True) for k in ("normal", "neighbour")):
        logger.warning(
            "memory: %s does not fit in %.0f GB per worker (peak %s GB; hardware.shard=%s): "
            "the clock times it anyway, summary.json flags it",
            timing.timed_model,
            mem["capacity_GB"],
            ", ".join(f"{k} {v:.1f}" for k, v in mem["peak_GB"].items()),
            mem["shard"],
        )


def log_done(logger: logging.Logger, summary: Dict, run_dir: Path) -> None:
    ppl = summary["final_val_ppl"]
    logger.info(
        "done: %d steps, final val ppl %s, throughput %.0f tokens/s simulated (%.1f s), wall %.1f s -> %s",
        summary["steps"],
        f"{ppl:.2f}" if ppl is not None else "n/a (numerics off)",
        summary["throughput_tok_s"] or 0,
        summary["sim_time_s"],
        summary["wall_time_s"],
        run_dir,
    )


@functools.lru_cache(maxsize=None)
def source_sha256(package: Optional[Path] = None) -> str:
    """The SHA-256 of this package's Python source (every `*.py` under mecefo_exp/, by path and
    content): the code a run segment ran, also without git (an installed wheel) and for edits a
    commit does not name (`<sha>-dirty`). The wheel's copy of analysis/ (mecefo_exp/analysis) is
    left out, as in a checkout. Read once per process (~100 files, a few ms)."""
    root = Path(package) if package is not None else Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        parts = path.relative_to(root).parts
        if "__pycache__" in parts or parts[0] == "analysis":
            continue
        try:
            content = path.read_bytes()
        except OSError:  # removed or replaced while read (an editor saving): named, not read
            content = b"<unreadable>"
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def identity(cfg, git_sha: Optional[str], run_dir: Path) -> Dict:
    """The fields of summary.json that are fixed for the run segment (git_sha and source_sha256:
    the code of the process that writes it; start.json keeps the start's)."""
    return {
        "method": cfg.method.name,
        "failure": cfg.failure.name,
        "model": cfg.model.name,
        "seed": cfg.seed,
        "n_workers": cfg.cluster.n_workers,
        "max_steps": cfg.trainer.max_steps,
        "numerics": cfg.trainer.numerics,
        "hardware": cfg.hardware.name,
        "timing_model": cfg.hardware.timing_model or cfg.model.name,
        "git_sha": git_sha,
        "source_sha256": source_sha256(),
        "run_dir": str(run_dir),
    }


def now_iso() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")
