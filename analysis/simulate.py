"""Numerics-free runs in this process, for sweeps that read only a run's summary (decision map, advise,
the closed-form tests): compose and run through mecefo_exp.api, in a scratch folder, keep the summary.

    summaries = run_all([["experiment=llama3_405b", "method=mecefo", "seed=0"], ...], processes=2)

Effective training time is the failure-free time of the steps done over the simulated time, as
analysis/frontier.py and Llama 3 report it.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .methods import METHOD_ORDER

#: the methods the decision map and advise run: every method of the registry, in the tables' order
METHODS = list(METHOD_ORDER)


def compose(overrides: Sequence[str]):
    """The config the command line would run, checked (a bad override is one ConfigError line)."""
    from mecefo_exp import api

    return api.compose(overrides)


def run_cfg(cfg, keep: Optional[Path] = None) -> Dict:
    """Run one composed config; its folder is a scratch one (removed) unless `keep` names one."""
    from mecefo_exp import api

    loggers = [logging.getLogger(name) for name in ("mecefo_exp", "mecefo_exp.trainer", "mecefo_exp.timing")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:  # a run's start lines and warnings say nothing here; put back afterwards
        lg.setLevel(logging.ERROR)
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mecefo-sim-"))
    try:
        return api.run(cfg, folder)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def run(overrides: Sequence[str]) -> Dict:
    return run_cfg(compose(overrides))


#: this process's recently composed configs, by their overrides besides seed= (a few: a pool's worker
#: may alternate between the two methods of a robustness check)
_COMPOSED: Dict[tuple, object] = {}
_COMPOSED_KEPT = 4


def compose_seeded(overrides: Sequence[str], values: Optional[Dict[str, object]] = None):
    """compose(overrides), composed once for jobs that differ only in `seed=` (a seed is read at run
    time, never while composing) or in `values` (dotted keys of plain values, set on the copy as an
    override would set them): a copy with those set, validated again. A composition costs ~0.3-0.8 s;
    advise's robustness check runs ~20 configurations that differ from two composed ones by one value."""
    import copy

    from omegaconf import OmegaConf

    from mecefo_exp.api import validate_run

    rest = tuple(o for o in overrides if not o.startswith("seed="))
    seeds = [o.split("=", 1)[1] for o in overrides if o.startswith("seed=")]
    if rest not in _COMPOSED:
        if len(_COMPOSED) >= _COMPOSED_KEPT:
            _COMPOSED.pop(next(iter(_COMPOSED)))
        _COMPOSED[rest] = compose(rest)
    cfg = copy.deepcopy(_COMPOSED[rest])
    if seeds:
        cfg.seed = int(seeds[-1])
    for key, value in (values or {}).items():
        OmegaConf.update(cfg, key, value, merge=False)
    if seeds or values:
        validate_run(cfg)
    return cfg


def _job(job):
    """A job: its overrides, or (overrides, {dotted key: value}) for values set after composing."""
    overrides, values = job if isinstance(job, tuple) else (job, None)
    try:
        return run_cfg(compose_seeded(overrides, values))
    except Exception as e:  # one failed cell is reported, never the whole sweep lost
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}


def run_all(jobs: List, processes: int = 2, each=None, chunksize: int = 1) -> List[Dict]:
    """Every job's summary, in order; `processes` worker processes (1: in this process). `each(i,
    summary)` is called as each job ends (in order), e.g. to keep a record that survives a stop.
    `chunksize` consecutive jobs go to one process (the seeds of one config: composed once)."""

    def results():
        if processes <= 1 or len(jobs) <= 1:
            yield from map(_job, jobs)
            return
        import multiprocessing as mp

        with mp.get_context("fork").Pool(processes, maxtasksperchild=20 * chunksize) as pool:
            yield from pool.imap(_job, jobs, chunksize=chunksize)

    out = []
    for i, summary in enumerate(results()):
        out.append(summary)
        if each is not None:
            each(i, summary)
    return out


def effective_time(summary: Dict) -> float:
    """Failure-free seconds of the steps done over the simulated seconds (NaN for a failed run)."""
    step_s = (summary.get("clock") or {}).get("failure_free_step_s")
    if summary.get("status") != "ok" or not step_s or not summary.get("sim_time_s"):
        return math.nan
    return summary["steps"] * step_s / summary["sim_time_s"]


def mean_interval(values: Sequence[float]):
    """Mean and the 95% Student-t half-width over seeds (NaN half-width for one value)."""
    from analysis.tables import mean_ci

    mean, half, _ = mean_ci(list(values))
    return mean, half


def fallback_overrides(write_s: float, job_mtbf_s: float, step_s: float, steps: int) -> Dict[str, List[str]]:
    """The fall-back checkpoints of the methods whose own mechanism does not absorb a whole-job fault
    (MeCeFO, Bamboo, Oobleck, REFT's disk, JIT's optional periodic one): Daly's optimum interval with
    M the mean time between whole-job faults. Checkpoint-restart and BAFT keep their own intervals."""
    from mecefo_exp.methods.intervals import daly_interval
    from mecefo_exp.methods.setting_roles import FALLBACK, setting_with_role
    from mecefo_exp.registry import REGISTRY, method_class

    every = max(1, min(steps, round(daly_interval(write_s, job_mtbf_s) / step_s)))
    keys = {m: setting_with_role(method_class(m), FALLBACK) for m in REGISTRY}
    return {m: [f"method.{key}={every}"] for m, key in keys.items() if key is not None}
