"""The training loop: one engine for every method.

    events = trace due by now          -> method.on_failure / on_recover (may stall, roll back)
    plan   = method.plan(step)          -> which worker computes which micro-batch, in which mode
    cost   = method.step_cost(plan)     -> known before the step runs (profile + constants)
    a failure before now + cost?        -> the step is interrupted, nothing is applied
    result = cluster.execute(plan)      -> real forward/backward, per-parameter averaging
    optimizer step, clock.commit_step, metrics row, method.after_step (checkpoints ...)
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import itertools
import json
import logging
import math
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Optional

import torch

from .cluster.local import LocalCluster, microbatch_losses
from .config import ConfigError, plain
from .console import EventPrinter, progress_redirect
from .data import SampleStream, load_corpus, validation_blocks
from .faults import FAIL, make_trace
from .methods import build_method
from . import runlock
from .methods.checkpointing import CheckpointStore
from .metrics import RunRecords, git_sha, write_json_last_resort
from .model import build_model, count_parameters
from .optim import lr_factor, make_optimizer, make_scheduler
from .timing.peaks import device_peak_tflops
from .timing import CATEGORIES, CostModel, SimClock, build_timing, state_bytes

log = logging.getLogger(__name__)

#: attempts at one step that change nothing (same step, clock and trace position) before the
#: loop gives up: each attempt must at least hand the method the event that interrupted it
MAX_IDLE_ATTEMPTS = 3
#: a long run's summary.json is refreshed at least this often (wall seconds), besides every
#: evaluation and disk checkpoint, so that a dead run's record shows how far it got
SUMMARY_EVERY_S = 30.0


class StepNotCommitted(RuntimeError):
    """torchft voted the step down (a collective failed): nothing of it is applied."""


class NoProgress(RuntimeError):
    """The loop would spin: a step was attempted again with nothing changed."""


class Terminated(BaseException):
    """SIGTERM/SIGHUP (timeout, SLURM, torchrun): end the run as failed, with the record saying why.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows it.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} received: the run was stopped from outside")


_held_signal = {"depth": 0, "signum": None}  # a signal that arrived inside _signals_held()


@contextlib.contextmanager
def _signals_held():
    """Let a checkpoint write finish before a SIGTERM ends the run.

    Raised inside torch.save's zip writer, the exception makes its cleanup fail with a
    RuntimeError that hides why the run stopped; the write takes milliseconds, so wait.
    """
    _held_signal["depth"] += 1
    try:
        yield
    finally:
        _held_signal["depth"] -= 1
    if _held_signal["depth"] == 0 and _held_signal["signum"] is not None:
        raise Terminated(_held_signal["signum"])


@contextlib.contextmanager
def signals_end_the_run():
    """Turn SIGTERM/SIGHUP into `Terminated` while the run is on (main thread only: Python's rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held_signal["signum"] = None

    def stop(signum, frame):
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)  # a second signal must not interrupt writing the record
        if _held_signal["depth"]:
            _held_signal["signum"] = signum
            return
        raise Terminated(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("cluster.device=cuda but no CUDA device is visible; allowed here: cpu, auto")
    return torch.device(name)


@torch.no_grad()
def evaluate(model: torch.nn.Module, blocks: torch.Tensor, device: torch.device, batch: int = 16) -> float:
    """Mean next-token loss over the validation blocks (all blocks have the same length)."""
    model.eval()
    total, n = 0.0, 0
    for start in range(0, blocks.shape[0], batch):
        chunk = blocks[start:start + batch].to(device)
        losses = microbatch_losses(model, chunk.unsqueeze(1))
        total += losses.sum().item()
        n += losses.numel()
    model.train()
    return total / n


class Experiment:
    """Builds every part from the config, then `run()` trains and leaves the run record."""

    def __init__(self, cfg, run_dir: Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.n_workers = cfg.cluster.n_workers
        self.max_steps = cfg.trainer.max_steps
        self.cluster_cfg = plain(cfg.cluster)
        self.step = 0
        self.rank = 0  # torchrun rank or torchft worker; 0 in the simulated tier
        self.leader = 0  # the process that writes the run record (torchft: moves when it dies)
        self.torchft = cfg.cluster.name == "torchft"
        self.membership = None  # torchft: who is alive comes from its quorum (cluster/torchft.py)
        self.counters = {"failures": 0, "recoveries": 0, "rollbacks": 0, "lost_steps": 0, "interrupted_steps": 0}
        self.tokens_processed = 0
        self.wall_start = time.perf_counter()
        self._flops_done, self._compute_s = 0.0, 0.0  # for the run's achieved TFLOP/s and MFU
        self.records: Optional[RunRecords] = None
        self.final_val_loss = float("nan")
        self.resumed = False
        self.kills_done: set = set()  # failure.kill: trace failures that already killed a rank
        self.numerics = cfg.trainer.numerics  # false: the loop walks trace, methods and clock only
        self._tokens_per_worker = cfg.data.micro_batch * cfg.data.seq_len
        self._kill = cfg.failure.kill
        self.resumes: list = []  # one record per resume of this folder, oldest first (summary.json)
        self._locked = False
        self._git_sha = git_sha()  # once: summary.json is rewritten during the run
        self._summary_at = time.perf_counter()
        self.print_event = EventPrinter(log, cfg.trainer.log_events)  # failures, rollbacks ... on the console
        self.progress: Optional[Progress] = None

    # ------------------------------------------------------------------ building
    def setup(self) -> None:
        cfg = self.cfg
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        torch.manual_seed(cfg.seed)
        self.device = pick_device(cfg.cluster.device)
        # dense peak of this machine's device at the run's precision (None on a CPU): MFU's denominator
        self.peak_tflops = device_peak_tflops(self.device, cfg.trainer.precision)
        if cfg.trainer.precision == "tf32":
            if self.device.type == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            else:
                log.warning("trainer.precision=tf32 acts on CUDA matmuls only: this %s run computes in fp32",
                            self.device.type)
        if self.distributed:
            self.start_distributed()
        if self.torchft:
            from .cluster.torchft import ENV_INCARNATION, ENV_WORKER

            self.rank = int(os.environ[ENV_WORKER])
            self.leader = 0 if os.environ.get(ENV_INCARNATION, "0") == "0" else -1  # a restart learns it from a peer
        if self.is_main and not self.torchft:  # torchft: the launcher holds the folder's lock
            runlock.acquire(self.run_dir)  # before anything is written: a second run refuses here
            self._locked = True
            for tmp in self.run_dir.glob("*.tmp"):  # a killed run's half-written summary/profile
                tmp.unlink(missing_ok=True)
            if cfg.resume:
                self.resumes = self._previous_resumes()
            else:
                from omegaconf import OmegaConf
                # the run's identity, written first and never again: what resume=true reuses
                OmegaConf.save(cfg, self.run_dir / "config.yaml", resolve=True)
        self.records = RunRecords(self.run_dir, cfg.logger, _plain(cfg), enabled=self.is_main)
        self.records.summary(self.summary("running"))

        self.build_training_state()
        self.clock = SimClock()
        self.method = build_method(plain(cfg.method), self)
        self.modes = self.method.modes()
        if self.numerics:
            cluster_cls, extra = LocalCluster, {}
            if self.distributed:
                from .cluster.torchrun import TorchrunCluster as cluster_cls
            if self.torchft:
                from .cluster.torchft import ENV_INCARNATION, ENV_LIGHTHOUSE, ENV_STORE, TorchftCluster as cluster_cls
                from .cluster.torchft import TorchftMembership

                self.membership = TorchftMembership(self, self.rank, int(os.environ.get(ENV_INCARNATION, "0")),
                                                    os.environ[ENV_LIGHTHOUSE], os.environ[ENV_STORE])
                extra = {"worker": self.rank, "manager": self.membership.manager}
            self.cluster = cluster_cls(self.model, self.stream, self.modes, self.device, cfg.cluster.chunk_microbatches,
                                       grad_accum=cfg.trainer.grad_accum, precision=cfg.trainer.precision,
                                       compile=cfg.trainer.compile, **extra)
        self.build_clock()
        self.method.setup()
        # the harness's own crash-safety checkpoints (trainer.resume_every), apart from the method's
        self.resume_store = CheckpointStore(self, keep=1, folder="resume") if self.numerics else None
        for store in (getattr(self.method, "store", None), self.resume_store):
            if store is not None and store.clean_incomplete():
                log.warning("%s: removed half-written checkpoints a killed run left", store.root)
        if cfg.resume:
            self.resume()
        if cfg.failure.kill and not self.torchft:
            kills = self.run_dir / "kills.txt"
            self.kills_done = set(kills.read_text().split()) if kills.exists() else set()
        if self.membership is not None:
            self.membership.start()
            self.resumed = self.membership.joining  # a restarted worker's state comes from a peer
        self.log_start()

    def build_training_state(self) -> None:
        """Corpus, model, optimizer; without numerics only the model's shape (meta device)."""
        cfg = self.cfg
        if self.numerics or cfg.model.vocab_size is None:  # the tokenizer's vocabulary sizes the model
            self.corpus = load_corpus(cfg.data)
            self.vocab_size = self.corpus.vocab_size
        else:
            self.vocab_size = cfg.model.vocab_size
        if not self.numerics:
            self.model = build_model(cfg.model, self.vocab_size, cfg.seed, device="meta")
            self.n_params = count_parameters(self.model)
            return
        corpus = self.corpus
        self.stream = SampleStream(corpus.train, cfg.data.seq_len, cfg.data.micro_batch, self.n_workers, cfg.seed)
        self.val_blocks = validation_blocks(corpus.val, cfg.data.seq_len, cfg.data.eval_blocks)
        self.model = build_model(cfg.model, corpus.vocab_size, cfg.seed).to(self.device)
        self.optimizer = make_optimizer(self.model, cfg.trainer)
        self.scheduler = make_scheduler(self.optimizer, cfg.trainer)
        self.n_params = count_parameters(self.model)

    def log_start(self) -> None:
        cfg, exp, info = self.cfg, self.trace.expected, self.timing.info
        step_s = self.costs.failure_free_step(self.n_workers).total
        data = (f"corpus {self.corpus.train.size} train tokens ({self.stream.epochs_at(self.max_steps - 1):.1f} epochs)"
                if self.numerics else "numerics off (no tensor math)")
        log.info("%s: %s, %d workers, %.2fM parameters, %d steps of %d tokens, %s",
                 cfg.method.name, cfg.model.name, self.n_workers, self.n_params / 1e6, self.max_steps,
                 self.tokens_per_step, data)
        eff = f", efficiency {info['efficiency']:.3f} ({info['efficiency_source']})" if "efficiency" in info else ""
        log.info("clock: hardware=%s, %s compute, timing %s: failure-free step %.4g s%s; fingerprint %s",
                 info["hardware"], info["compute"], info["timed_model"], step_s, eff, info["fingerprint"])
        log.info("failure=%s: expected %.1f failures and %.2f workers down on average over the failure-free run "
                 "(%.1f simulated s)", cfg.failure.name, exp["failures"], exp["mean_workers_down"],
                 step_s * self.max_steps)
        if exp["failures"] > self.max_steps:
            # The paper's rates are per paper hour, and the whole run is cluster.paper_run_h paper
            # hours long: a short run packs the same failures into few steps, and a method whose
            # recovery outlasts the gap between failures (a restart) keeps failing while it
            # recovers (failure=high, 1 step, checkpoint: 254 failures).
            log.warning("failure=%s: %.1f failures expected in %d steps (more than one per step): failure rates are per "
                        "paper hour and the run stands for cluster.paper_run_h=%g paper hours whatever its length, so "
                        "a short run is mostly failures and recoveries; use more steps or failure=none", cfg.failure.name,
                        exp["failures"], self.max_steps, cfg.cluster.paper_run_h)

    @property
    def tokens_per_step(self) -> int:
        return self.n_workers * self._tokens_per_worker

    def build_clock(self) -> None:
        """The kernel seconds (measured, from FLOPs, or a profile file), the cost model, the trace."""
        cfg = self.cfg
        resumed_profile = self.run_dir / "profile.json"
        if cfg.resume and cfg.cluster.profile == "auto" and resumed_profile.exists():
            cfg.cluster.profile = str(resumed_profile)  # a resumed run keeps its own clock
        self.timing = build_timing(cfg, self.method, self.modes, self.vocab_size, self.device,
                                   real_model=self.model if self.numerics else None,
                                   stream=getattr(self, "stream", None), is_main=self.is_main)
        if self.distributed and self.timing.info["compute"] == "measured":
            from .cluster.torchrun import broadcast_object
            self.timing.profile = broadcast_object(self.timing.profile)  # rank 0 measured it
        self.profile = self.timing.profile
        self.costs = CostModel(self.profile, cfg.cluster, cfg.hardware, self.timing.n_params,
                               state_bytes=state_bytes(self.timing.n_params), modes=self.modes, max_steps=self.max_steps)
        step_s = self.costs.failure_free_step(self.n_workers).total
        self.trace = make_trace(cfg.failure, self.n_workers, step_s, self.max_steps, cfg.seed, cfg.cluster.paper_run_h,
                                real_time=self.costs.real_time)
        if self.is_main:
            self.trace.write_csv(self.run_dir / "trace.csv")
        self.records.write_json("profile.json", self.profile.to_json())
        mem = self.timing.memory
        if not all(mem["fits"].get(k, True) for k in ("normal", "neighbour")):
            log.warning("memory: %s does not fit in %.0f GB per worker (peak %s GB; hardware.shard=%s): "
                        "the clock times it anyway, summary.json flags it",
                        self.timing.timed_model, mem["capacity_GB"],
                        ", ".join(f"{k} {v:.1f}" for k, v in mem["peak_GB"].items()), mem["shard"])

    def clock_summary(self) -> Dict:
        """What summary.json says about the clock: which, its fingerprint, FLOPs, MFU, memory."""
        t, costs = self.timing, self.costs
        step = costs.failure_free_step(self.n_workers)
        flops = t.counts["mb:normal"]["flops"]
        peak = self.cfg.hardware.peak_tflops * 1e12
        out = dict(t.info)
        out.update(n_params_timed=t.n_params, failure_free_step_s=step.total,
                   flops_per_worker_step=flops, paper_time=self.cfg.hardware.paper_time,
                   implied_mfu=flops / (step.total * peak) if step.total > 0 else None,
                   flop_ratio_neighbour_normal=next((c["flops"] / flops for k, c in t.counts.items()
                                                     if k.startswith("neighbor_pair")), None))
        return out

    # ------------------------------------------------------------- torchrun tier
    @property
    def distributed(self) -> bool:
        return self.cluster_cfg.name == "torchrun"

    def start_distributed(self) -> None:
        import torch.distributed as dist

        from .cluster.torchrun import init_distributed, launched_by_torchrun

        if not launched_by_torchrun():
            raise ConfigError("cluster=torchrun needs torchrun: torchrun --nproc-per-node=N run.py cluster=torchrun ...")
        init_distributed(self.cfg.cluster.backend)
        self.rank, world = dist.get_rank(), dist.get_world_size()
        if world != self.n_workers:
            raise ConfigError(f"cluster.n_workers={self.n_workers} but torchrun started {world} ranks; "
                              f"set cluster.n_workers={world}")
        if self.device.type == "cuda":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == self.leader

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist
            dist.barrier()
        elif self.membership is not None:
            self.membership.barrier()

    # ------------------------------------------------------------- torchft tier
    def books(self) -> Dict:
        """What a later step reads besides the training state: clock, counters, trace, method."""
        store = getattr(self.method, "store", None)
        return {"clock": self.clock.state_dict(), "counters": dict(self.counters),
                "tokens_processed": self.tokens_processed, "trace_next": self.trace._next,
                "method": self.method.state_dict(), "final_val_loss": self.final_val_loss,
                # the method's checkpoints on disk it may roll back to (a resume reads the folder instead)
                "checkpoints_saved": list(store.saved) if store is not None else []}

    def load_books(self, h: Dict) -> None:
        self.clock.load_state_dict(h["clock"])
        self.counters.update(h["counters"])
        self.tokens_processed = h["tokens_processed"]
        self.trace._next = h["trace_next"]
        self.final_val_loss = h["final_val_loss"]
        self.method.load_state_dict(h["method"])

    def load_peer_state(self, training: Dict, books: Dict) -> None:
        """torchft heals this restarted worker with a live peer's state (no disk)."""
        self._load_training_state(training)
        self.step = training["step"]
        self.load_books(books)
        store = getattr(self.method, "store", None)
        if store is not None:
            store.saved = list(books["checkpoints_saved"])

    def set_leader(self, worker: int) -> None:
        """torchft: the record's writer died; the lowest live worker takes the record over."""
        was = self.is_main
        self.leader = worker
        if self.is_main and not was:
            self.records.take_over()
            if self.progress is not None and self.cfg.trainer.progress != "none":
                self.progress.mode = "lines"  # a bar would fight the dead writer's on the terminal
            for handler in logging.getLogger().handlers:  # the console says what the leader says
                if type(handler) is logging.StreamHandler:
                    handler.setLevel(logging.INFO)
            log.info("worker %d now writes the run record", worker)

    def membership_event(self, kind: str, worker: int, detail: Dict) -> None:
        """A failure or recovery the method is about to hear of: the event row and counters."""
        self.event(kind, worker, detail)
        self.counters["failures" if kind == FAIL else "recoveries"] += 1

    # ------------------------------------------------------- what methods may use
    def state_dict(self, harness: bool = False) -> Dict:
        """References to the live state; torch.save copies it, in-memory snapshots must clone.

        With `harness`, also the books a resumed run needs (clock, counters, trace position,
        the method's state); a rollback restores only the training state. Without numerics
        there is no training state: only the step (and no resume: such a run takes seconds).
        """
        if not self.numerics:
            return {"step": self.step}
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "step": self.step, "rng": torch.get_rng_state()}
        if harness:
            state["harness"] = {**self.books(),
                                # how long each jsonl stream was: a resume cuts back to this
                                "records": self.records.sizes(),
                                "wall_time_s": time.perf_counter() - self.wall_start}
        return state

    def resume(self) -> None:
        """Continue this run folder from its newest complete checkpoint (resume=true)."""
        store = getattr(self.method, "store", None)
        if store is None:
            raise ConfigError(f"resume=true: method={self.cfg.method.name} writes no checkpoints to resume from")
        steps = store.on_disk()
        harness_steps = self.resume_store.on_disk() if self.resume_store is not None else []
        if not steps and not harness_steps:
            raise ConfigError(f"resume=true but {store.root} holds no complete checkpoint")
        # the newest of the method's checkpoints and the harness's own (trainer.resume_every);
        # the method's stay its rollback targets either way
        source = self.resume_store if harness_steps and (not steps or harness_steps[-1] > steps[-1]) else store
        state = source.load(source.on_disk()[-1])
        self._load_training_state(state)
        self.step = state["step"]
        h = state["harness"]
        self.load_books(h)
        # wall_time_s goes on from the checkpoint: the kept segments' wall time, summed
        self.wall_start = time.perf_counter() - h.get("wall_time_s", 0.0)
        store.saved = steps[-store.keep:]
        if self.resume_store is not None:
            self.resume_store.saved = harness_steps[-1:]
        self.resumed = True
        n = len(self.resumes) + 1
        superseded = {}
        if "records" in h:  # rows written after the checkpoint belong to the discarded segment
            superseded = self.records.supersede(h["records"], label=f"resume-{n}")
        else:
            log.warning("%s predates record lengths in checkpoints: rows after it are not cut", source.path(self.step))
        record = {"n": n, "at": datetime.datetime.now().isoformat(timespec="seconds"), "from_step": self.step,
                  "checkpoint": str(source.path(self.step).relative_to(self.run_dir)), "sim_time_s": self.clock.now,
                  "superseded_rows": superseded}
        self.resumes.append(record)
        self.event("resume", detail={"step": self.step, "checkpoint": str(source.path(self.step)), "n": n,
                                     "superseded_rows": superseded})
        log.info("resumed %s at step %d (simulated time %.2f s); superseded rows %s (kept in superseded/resume-%d/)",
                 self.run_dir, self.step, self.clock.now, superseded or "none", n)
        self.records.summary(self.summary("running"))  # the record says at once that it was resumed

    def _previous_resumes(self) -> list:
        """The resumes the folder's summary.json already records (before it is rewritten)."""
        try:
            return list(json.loads((self.run_dir / "summary.json").read_text()).get("resumes") or [])
        except (OSError, ValueError, AttributeError):
            return []

    def _load_training_state(self, state: Dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])

    def restore(self, state: Dict, to_step: int, reason: str, worker: Optional[int] = None) -> None:
        """Roll back for real: load the saved state, discard the steps after it."""
        if state["step"] != to_step:
            raise RuntimeError(f"saved state is of step {state['step']}, asked to restore step {to_step}")
        if self.numerics:
            self._load_training_state(state)
        lost = self.step - to_step
        lost_s = self.clock.discard_steps_from(to_step)
        self.counters["rollbacks"] += 1
        self.counters["lost_steps"] += lost
        self.event("rollback", worker, {"reason": reason, "from_step": self.step, "to_step": to_step,
                                        "lost_steps": lost, "lost_s": lost_s})
        self.step = to_step

    def event(self, kind: str, worker: Optional[int] = None, detail: Optional[dict] = None) -> None:
        row = {"sim_time_s": self.clock.now, "step": self.step, "kind": kind, "worker": worker, "detail": detail or {}}
        self.records.event(row)
        if self.is_main:
            self.print_event(row)

    @property
    def failure_units(self) -> int:
        """How many independent failure units the workers form (failure.unit_gpus workers each)."""
        return self.n_workers // self.cfg.failure.unit_gpus

    def expected_down_fraction(self) -> float:
        """Expected share of workers down at a time (the trace's expectation; 0 without failures)."""
        down = self.trace.expected["mean_workers_down"]
        return down / self.n_workers if down and math.isfinite(down) else 0.0

    def cluster_mtbf_s(self) -> float:
        """Mean time between failures of the whole cluster, from the trace's expectation."""
        run_s = self.costs.failure_free_step(self.n_workers).total * self.max_steps
        # failure instants (a whole 8-GPU unit failing is one event for the job, not eight)
        expected = self.trace.expected.get("unit_failures", self.trace.expected["failures"])
        if not expected or not math.isfinite(expected):
            return math.inf
        return run_s / expected

    @property
    def alive(self) -> int:
        return self.n_workers - len(self.method.down)

    # ------------------------------------------------------------------ the loop
    def apply_due_events(self) -> None:
        """Hand the method every event due by now, including those that fall in its stalls.

        torchft: the events go to the membership, which kills this process if it is the one
        failing and otherwise waits for the quorum to show them (cluster/torchft.py).
        """
        if self.membership is not None and self.membership.joining:
            return  # a restarted worker: its trace position comes from the peer that heals it
        while True:
            due = self.trace.pop_until(self.clock.now)
            if not due:
                return
            # failures at the same instant (a whole machine) reach the method together: a job
            # restart happens once for all of them
            for (_, kind), same in itertools.groupby(due, key=lambda ev: (ev.time, ev.kind)):
                same = list(same)
                if self.membership is not None and self._kill:
                    self.membership.on_trace_events(kind, same)
                    continue
                for ev in same:
                    if kind == FAIL and self._kill:
                        self.kill_if_mine(ev)
                    self.membership_event(kind, ev.worker, {"trace_time_s": ev.time})
                if kind == FAIL:
                    self.method.on_failures([ev.worker for ev in same])
                else:
                    for ev in same:
                        self.method.on_recover(ev.worker)

    def kill_if_mine(self, ev) -> None:
        """failure.kill: the failing worker's rank dies for real (once per trace event).

        It first notes the event in kills.txt, so that after torchrun's restart the resumed
        run treats this failure as already happened (a simulated restart from the same
        checkpoint, which is what the real restart just did) and does not die again.
        """
        key = f"{ev.time:.9f}:{ev.worker}"
        if key in self.kills_done or ev.worker != self.rank:
            return
        import signal

        with open(self.run_dir / "kills.txt", "a") as f:
            f.write(key + "\n")
            f.flush()
            os.fsync(f.fileno())
        log.warning("failure.kill: worker %d (rank %d) is killed at simulated %.3f s", ev.worker, self.rank, ev.time)
        os.kill(os.getpid(), signal.SIGKILL)

    def train(self) -> None:
        tcfg = self.tcfg = plain(self.cfg.trainer)
        # one console per run: under torchrun and torchft only the record's writer reports
        progress = self.progress = Progress(tcfg, self.max_steps, quiet=not self.is_main)
        if not self.resumed:
            with _signals_held():  # REFT's snapshot is a torch.save too
                self.method.start()
            self.end_of_boundary(evaluated=False)
        last, idle = None, 0
        while self.step < self.max_steps:
            here = (self.step, self.trace._next, self.clock.now)
            idle = idle + 1 if here == last else 0
            if idle >= MAX_IDLE_ATTEMPTS:
                raise NoProgress(f"step {self.step} cannot make progress: {idle + 1} attempts in a row left the "
                                 f"simulated clock at {self.clock.now!r} s and the trace at event {self.trace._next} "
                                 f"(next failure at {self.trace.next_failure_time()!r} s)")
            last = here
            self.apply_due_events()
            if self.membership is not None:
                self.membership.sync()  # torchft: the quorum shows who is alive; the method hears it
            plan = self.method.plan(self.step)
            if not plan.computing_workers:  # nobody can compute: wait for the next event
                nxt = self.trace.next_event_time()
                if nxt is None:
                    raise RuntimeError("every worker is down and the trace has no recovery left")
                self.clock.charge("stall", max(0.0, nxt - self.clock.now))
                continue
            cost = self.method.step_cost(plan)
            t_fail = self.trace.next_failure_time()
            if t_fail is not None and t_fail < self.clock.now + cost.total:
                self.counters["interrupted_steps"] += 1
                self.method.interrupted(plan, t_fail - self.clock.now)
                continue

            try:
                numbers = self.compute_step(plan) if self.numerics else self.skip_compute(plan)
            except StepNotCommitted as e:  # torchft: a peer died mid-step; the next quorum shows it
                log.warning("step %d not applied: %s", self.step, e)
                self.event("uncommitted", detail={"reason": str(e)})
                continue
            self.clock.commit_step(self.step, cost)
            self.tokens_processed += numbers.pop("tokens")
            row = {"step": self.step, "tokens": (self.step + 1) * self.tokens_per_step, **numbers,
                   "sim_time_s": self.clock.now, "wall_time_s": time.perf_counter() - self.wall_start,
                   "alive": self.alive, "degraded": plan.degraded, "step_cost_s": cost.total}
            self.records.metric(row)
            self.step += 1
            with _signals_held():  # REFT's snapshot is a torch.save too
                self.method.after_step(self.step - 1)  # the state is now that before step self.step
            progress.update(self.step, row.get("loss"), self.clock.now, self.tokens_per_step, self.alive,
                            tflops_s=self._flops_done / self._compute_s / 1e12 if self._compute_s > 0 else None)
            evaluated = False
            if tcfg.eval_every and self.step % tcfg.eval_every == 0 and self.step < self.max_steps:
                evaluated = self.run_eval()
            self.end_of_boundary(evaluated)
        progress.close()
        self.run_eval()

    def end_of_boundary(self, evaluated: bool) -> None:
        """Between two steps, after all end-of-step work: write the checkpoint saved at this
        boundary (its books are now complete) and refresh summary.json's progress fields."""
        store = getattr(self.method, "store", None)
        with _signals_held():
            wrote = store.flush() if store is not None else False
            every = self.cfg.trainer.resume_every
            if (self.resume_store is not None and every and self.step % every == 0 and 0 < self.step < self.max_steps
                    and not (store is not None and self.step in store.saved)):
                self.resume_store.save(self.step)  # not charged: the harness's safety, not the method's
                wrote = self.resume_store.flush() or wrote
        if wrote or evaluated or time.perf_counter() - self._summary_at > SUMMARY_EVERY_S:
            self.records.summary(self.summary("running"))
            self._summary_at = time.perf_counter()

    def compute_step(self, plan) -> Dict:
        """Forward/backward of the plan, the method's look at the gradients, clipping, AdamW;
        with the FLOP/s this process reached on it (wall clock) and its MFU where the device's
        peak is known (timing/peaks.py)."""
        tcfg = self.cfg.trainer
        started = time.perf_counter()
        result = self.cluster.execute(plan)
        if not self.cluster.commit():
            raise StepNotCommitted("torchft's should_commit said no (a collective of this step failed)")
        self.method.before_optimizer(plan, result)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tcfg.grad_clip or float("inf"))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        seconds = time.perf_counter() - started
        flops = self.executed_flops(plan)
        self._flops_done += flops
        self._compute_s += seconds
        tflops = flops / max(seconds, 1e-12) / 1e12
        return {"tokens": result.tokens, "loss": result.loss, "lr": lr, "grad_norm": float(grad_norm),
                "tflops_s": tflops, "mfu": tflops / self.peak_tflops if self.peak_tflops else None}

    def executed_flops(self, plan) -> float:
        """FLOPs of the micro-batches this process ran for `plan` (its share under torchrun),
        from the counted kernels (timing/flops.py: torch's FlopCounterMode on the model)."""
        counts = self.timing.counts
        return sum(len(samples) * counts.get(self.modes[mode].kernel, {}).get("flops", 0.0)
                   for mode, samples in self.cluster.my_share(plan).items())

    def skip_compute(self, plan) -> Dict:
        """trainer.numerics=false: the method still sees the step (its counters), nothing is computed."""
        self.method.before_optimizer(plan, None)
        if not hasattr(self, "_lr_factor"):
            self._lr_factor = lr_factor(self.tcfg)
        return {"tokens": self.tokens_per_step, "lr": self.tcfg.lr * self._lr_factor(self.step)}

    def run_eval(self) -> bool:
        if not self.numerics:
            return False
        loss = evaluate(self.model, self.val_blocks, self.device)
        self.final_val_loss = loss
        self.records.eval({"step": self.step, "sim_time_s": self.clock.now,
                           "tokens": self.step * self.tokens_per_step, "val_loss": loss, "val_ppl": math.exp(loss)})
        log.info("step %d  val_loss %.4f  val_ppl %.2f  sim_time %.1fs", self.step, loss, math.exp(loss), self.clock.now)
        return True

    def summary(self, status: str, error: Optional[str] = None) -> Dict:
        cfg = self.cfg
        clock = getattr(self, "clock", None)
        sim = clock.now if clock else 0.0
        committed = self.step * self.tokens_per_step
        data = {
            "status": status, "method": cfg.method.name, "failure": cfg.failure.name, "model": cfg.model.name,
            "seed": cfg.seed, "n_workers": self.n_workers, "steps": self.step, "max_steps": self.max_steps,
            "tokens_processed": self.tokens_processed, "tokens_committed": committed, "sim_time_s": sim,
            "wall_time_s": time.perf_counter() - self.wall_start,
            "throughput_tok_s": committed / sim if sim > 0 else None,
            # this machine, wall clock, this segment's computed steps (evals and checkpoints excluded)
            "achieved_tflops_s": self._flops_done / self._compute_s / 1e12 if self._compute_s > 0 else None,
            "mfu": (self._flops_done / self._compute_s / 1e12 / self.peak_tflops
                    if self._compute_s > 0 and self.peak_tflops else None),
            "final_val_loss": self.final_val_loss,
            "final_val_ppl": math.exp(self.final_val_loss) if math.isfinite(self.final_val_loss) else None,
            "numerics": self.numerics, "hardware": cfg.hardware.name,
            "timing_model": cfg.hardware.timing_model or cfg.model.name,
            "failures": self.counters["failures"], "rollbacks": self.counters["rollbacks"],
            "lost_steps": self.counters["lost_steps"], "interrupted_steps": self.counters["interrupted_steps"],
            "time_breakdown": dict(clock.breakdown) if clock else {c: 0.0 for c in CATEGORIES},
            "git_sha": self._git_sha, "run_dir": str(self.run_dir),
            "updated_at": datetime.datetime.now().isoformat(timespec="seconds"), "resumes": self.resumes,
        }
        trace = getattr(self, "trace", None)
        if trace is not None:
            actual = trace.stats_until(sim) if sim > 0 else {"failures": 0, "mean_workers_down": 0.0}
            data["failures_expected"] = trace.expected["failures"]
            data["mean_workers_down_expected"] = trace.expected["mean_workers_down"]
            data["mean_workers_down"] = actual["mean_workers_down"]
        if hasattr(self, "corpus"):
            data["data_fingerprint"] = self.corpus.fingerprint
        if hasattr(self, "n_params"):
            data["n_params"] = self.n_params
        if getattr(self, "costs", None) is not None:
            data["clock"] = self.clock_summary()
            data["memory"] = self.timing.memory
        if hasattr(self, "method"):
            data.update(self.method.summary())
        if self.membership is not None:
            data["torchft"] = self.membership.summary()
        if error:
            data["error"] = error
        return data

    def run(self) -> Dict:
        """Train and write the record; summary.json says `failed` if anything goes wrong
        (an exception, a full disk, SIGTERM/SIGHUP/Ctrl-C), with the reason."""
        try:
            with signals_end_the_run():
                try:
                    self.setup()
                    self.train()
                    summary = self.summary("ok")
                    self.records.summary(summary)
                    self.records.close()
                except BaseException as e:
                    if self.progress is not None:
                        self.progress.close()  # give the console back (and its log handlers) before the traceback
                    self._record_failure(e)
                    raise
        finally:
            if self._locked:
                runlock.release(self.run_dir)
                self._locked = False
            if self.membership is not None:
                self.membership.shutdown()
        ppl = summary["final_val_ppl"]
        log.info("done: %d steps, final val ppl %s, throughput %.0f tokens/s simulated (%.1f s), wall %.1f s -> %s",
                 summary["steps"], f"{ppl:.2f}" if ppl is not None else "n/a (numerics off)",
                 summary["throughput_tok_s"] or 0, summary["sim_time_s"],
                 summary["wall_time_s"], self.run_dir)
        return summary

    def _record_failure(self, e: BaseException) -> None:
        """Leave summary.json `failed` with the reason, even on a full disk."""
        if self.records is None or not self.records.enabled:
            return
        error = f"{type(e).__name__}: {e}"
        try:
            data = self.summary("failed", error=error)
        except Exception as inner:  # the books may be half-built: say at least what happened
            data = {"status": "failed", "error": error, "summary_error": repr(inner), "run_dir": str(self.run_dir)}
        path = self.run_dir / "summary.json"
        try:
            self.records.summary(data)
        except OSError:  # no room for the atomic copy: overwrite in place, which frees the old blocks first
            try:
                write_json_last_resort(path, data)
            except OSError as last:
                log.error("cannot record the failure in %s: %s", path, last)
        try:
            self.records.close()
        except OSError:
            pass


class Progress:
    """A tqdm bar on a terminal, plain log lines otherwise (CI, files, sweeps)."""

    def __init__(self, tcfg, total: int, quiet: bool = False):
        mode = "none" if quiet else tcfg.progress
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode, self.every, self.total = mode, max(1, tcfg.log_every), total
        self.bar = None
        self.t0 = time.perf_counter()
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True)
            # log lines (events, evaluations) go through tqdm.write while the bar is drawn
            self._redirect = progress_redirect()
            self._redirect.__enter__()

    def update(self, step: int, loss: Optional[float], sim_s: float, tokens_per_step: int, alive: int,
               tflops_s: Optional[float] = None) -> None:
        if self.mode == "none":
            return
        tok_s = step * tokens_per_step / max(1e-9, time.perf_counter() - self.t0)
        if loss is None:  # numerics off
            if self.bar is not None:
                self.bar.n = step
                self.bar.set_postfix(sim=f"{sim_s:.0f}s", alive=alive, refresh=False)
                self.bar.refresh()
            elif step % self.every == 0 or step == self.total:
                log.info("step %d/%d  sim %.1fs  alive %d", step, self.total, sim_s, alive)
            return
        ppl = math.exp(min(loss, 50.0))
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(loss=f"{loss:.3f}", ppl=f"{ppl:.1f}", tok_s=f"{tok_s:.0f}",
                                 tflops=f"{tflops_s or 0:.3g}", alive=alive, refresh=False)
            self.bar.refresh()
        elif step % self.every == 0 or step == self.total:
            log.info("step %d/%d  loss %.4f  ppl %.1f  %.0f tok/s  %.3g TFLOP/s (wall)  sim %.1fs  alive %d",
                     step, self.total, loss, ppl, tok_s, tflops_s or 0.0, sim_s, alive)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self._redirect.__exit__(None, None, None)
            self.bar = None


def _plain(cfg) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)
