"""Building a run's parts from its config, in the one order they depend on each other.

The method's modes decide the executor; the executor and the model decide the clock; the clock
decides the trace (its failure rates are per simulated second). A resumed run then loads its
newest complete checkpoint. Each part is set on the run as it is built, so a summary or a
failure record written halfway through setup says what was there (`Context.built`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .. import runlock
from ..config import plain
from ..failures import check_whole_groups, make_trace
from ..methods import build_method
from ..methods.checkpointing import store_of_run
from ..metrics import RunRecords
from ..timing import CostModel, Measuring, build_timing, state_bytes
from .context import log
from .invariants import NodePresence
from .record import log_start, warn_if_memory_does_not_fit
from .resume import config_sha256, previous_resumes, recorded_config_sha256, resume_from_folder, save_run_config
from .shape_only import ShapeOnlyState

if TYPE_CHECKING:
    from .experiment import Experiment


def build_parts(run: Experiment) -> None:
    """The device and the folder's lock, the record, the training state, the method, the clock
    and the trace, the checkpoint stores; then the resume, if asked for."""
    cfg = run.cfg
    device = peak_tflops = None  # numerics off: no device, and no tensor library is imported
    if cfg.trainer.numerics:
        import torch

        from ..timing.peaks import device_peak_tflops
        from .training import prepare_device

        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        torch.manual_seed(cfg.seed)
        device = prepare_device(cfg)
        peak_tflops = device_peak_tflops(device, cfg.trainer.precision)
    run.device = run.tier.start(device)
    if run.is_main and run.tier.holds_folder_lock:
        runlock.acquire(run.run_dir)  # before anything is written: a second run refuses here
        run.folder_locked = True
        for tmp in run.run_dir.glob("*.tmp"):  # a killed run's half-written summary/profile
            tmp.unlink(missing_ok=True)
        if cfg.resume:
            run.resumes = previous_resumes(run.run_dir)
            run.config_sha256 = recorded_config_sha256(run.run_dir)[0]
        else:  # the run's identity, written first and never again: what resume=true reuses (and start.json)
            save_run_config(cfg, run.run_dir, start=True)
    run.config_sha256 = run.config_sha256 or config_sha256(run.run_dir)
    run.records = RunRecords(run.run_dir, cfg.logger, plain(cfg), enabled=run.is_main)
    if not cfg.resume:  # a resume says `running` once it has loaded a checkpoint (resume())
        run.records.summary(run.summary("running"))

    if cfg.trainer.numerics:
        from .training import TrainingState

        assert run.device is not None  # numerics: the device prepare_device chose (the tier's rank's)
        run.training = TrainingState(cfg, run.n_workers, run.device, peak_tflops)
    else:
        run.training = ShapeOnlyState(cfg, run.n_workers)
    run.method = build_method(plain(cfg.method), run)
    modes = run.method.modes()
    run.training.attach(run.tier.make_cluster(run, run.training, modes, cfg.cluster, cfg.trainer), modes)
    build_clock(run, modes)
    run.books.keep(run.trace, run.method, run.method.store)
    run.method.setup()
    run.resume_store = store_of_run(run, folder="resume", keep=1) if run.training.numerics else None
    for store in (run.method.store, run.resume_store):
        if store is not None and store.clean_incomplete():
            log.warning("%s: removed half-written checkpoints a killed run left", store.root)
    if cfg.resume:
        resume(run)
    run.resumed = run.tier.begin(run.resumed)
    run.event_driven = cfg.trainer.event_driven and not run.training.numerics
    log_start(log, cfg, run.trace, run.timing, run.costs, run.training, run.max_steps, run.tokens_per_step)


def build_clock(run: Experiment, modes) -> None:
    """The kernel seconds (measured, from FLOPs, or a profile file), the cost model, the trace."""
    cfg = run.cfg
    resumed_profile = run.run_dir / "profile.json"
    # a resumed run keeps its own clock: the profile.json its first start wrote
    own = resumed_profile if cfg.resume and cfg.cluster.profile == "auto" and resumed_profile.exists() else None
    numerics = run.training.numerics
    here = Measuring(run.device, run.training.model if numerics else None, run.training.stream, run.is_main)
    run.timing = build_timing(cfg, run.method, modes, run.training.vocab_size, here, own_profile=own)
    run.tier.share_profile(run.timing)
    run.training.kernel_counts = run.timing.counts
    run.costs = CostModel(
        run.timing.profile,
        cfg.cluster,
        cfg.hardware,
        run.timing.n_params,
        state_bytes=state_bytes(run.timing.n_params),
        modes=modes,
        max_steps=run.max_steps,
        method=cfg.method.name,
        shape=run.placement,
    )
    step_s = run.costs.failure_free_step(run.n_workers).total
    run.trace = make_trace(
        cfg.failure,
        run.n_workers,
        step_s,
        run.max_steps,
        cfg.seed,
        cfg.cluster.paper_run_h,
        real_time=run.costs.real_time,
        job_start_s=run.method.job_start_s(),
    )
    if run.placement is not None:
        check_whole_groups(run.trace, run.placement.tp)
    # a node trace: no step computed on more nodes than present (a replay of another simulator,
    # method.variant, keeps that simulator's books, its documented quirks included: not checked)
    run.presence = NodePresence(None if cfg.method.get("variant") else run.trace)
    # a resumed run keeps the files its first start wrote (it reads its own profile.json)
    if run.is_main and not (cfg.resume and (run.run_dir / "trace.csv").exists()):
        run.trace.write_csv(run.run_dir / "trace.csv")
    if not (cfg.resume and resumed_profile.exists()):
        run.records.write_json("profile.json", run.timing.profile.to_json())
    if run.costs.steps.kernels_bound_memory:
        warn_if_memory_does_not_fit(log, run.timing)


def resume(run: Experiment) -> None:
    """Continue this run folder from its newest complete checkpoint (resume=true)."""
    point = resume_from_folder(
        run.run_dir,
        run.cfg.method.name,
        run.method.store,
        run.resume_store,
        run.training,
        run.books,
        run.records,
        len(run.resumes),
    )
    run.step = point.step
    run.wall_start = time.perf_counter() - point.wall_time_s
    run.resumed = True
    run.resumes.append(point.record)
    checkpoint = run.run_dir / point.record["checkpoint"]
    superseded = point.record["superseded_rows"]
    run.event(
        "resume",
        detail={
            "step": run.step,
            "checkpoint": str(checkpoint),
            "n": point.record["n"],
            "superseded_rows": superseded,
        },
    )
    log.info(
        "resumed %s at step %d (simulated time %.2f s); superseded rows %s (kept in superseded/resume-%d/)",
        run.run_dir,
        run.step,
        run.clock.now,
        superseded or "none",
        point.record["n"],
    )
    run.records.summary(run.summary("running"))  # the record says at once that it was resumed
