"""MeCeFO: a neighbour does both workers' work, cheaply (Hu et al., NeurIPS 2025).

When worker j fails, a live neighbour computes its own micro-batch and j's in one step, both under
the three approximations of numerics/approx.py (attention skipped in backward, FFN recomputation, low-rank
FFN weight gradients); attention weights average over the workers that are neither failed nor
neighbours. A failed worker without an eligible neighbour falls back to the checkpoint. The
failure-free path is the plain engine, bit for bit. docs/METHODS.md ("MeCeFO in the harness: the
rules") has the neighbour rule, the aggregation, the costs and the gradient-error measurement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, cast

from ..config import at_least, choices
from ..numerics.projections import LowRankProjections, is_attention_parameter, svd_flops
from ..plan import NORMAL, Mode, Plan, Sample, SparsePlan, WorkItem
from ..timing.clock import StepCost
from ..timing.profile import Kernel
from ..timing.steps import Help
from .checkpointed import CheckpointedConfig
from .in_place import InPlaceMethod
from .setting_roles import FALLBACK, role

FFN_MODULES = ("gate_proj", "up_proj", "down_proj")


@dataclass
class MecefoConfig(CheckpointedConfig):
    skip_attention: bool = True
    recompute_ffn: bool = True
    lowrank_ffn: bool = True
    rank: int = field(default=64, metadata=at_least(1))  # r of the low-rank FFN weight gradient
    svd_every: int = field(default=200, metadata=at_least(1, "steps"))  # tau: steps between SVD refreshes
    # how a refresh finds the top-r right singular vectors: full (an SVD of W) | randomized (a range
    # finder of r + svd_oversample columns with svd_power_iters power iterations: GEMM work)
    svd: str = field(default="full", metadata=choices("full", "randomized"))
    svd_oversample: int = field(default=8, metadata=at_least(0))
    svd_power_iters: int = field(default=2, metadata=at_least(0))
    lowrank_modules: List[str] = field(default_factory=lambda: list(FFN_MODULES))
    # degraded steps between gradient-error measurements (0: off)
    grad_error_every: int = field(default=10, metadata=at_least(0, "(0: off)"))
    # the fall-back when no neighbour is eligible
    checkpoint_interval: Any = field(default="auto", metadata=role(FALLBACK))


MODE = "mecefo"
log = logging.getLogger(__name__)


def warn_if_rank_saturates(cfg, model) -> Optional[str]:
    """An SVD of an FFN weight has min(hidden, intermediate) singular vectors: a larger
    method.rank is clamped to that, and at that rank the projection of a weight whose input
    width it equals (gate_proj/up_proj when hidden <= intermediate) is the identity, so its
    weight gradient is exact, not low-rank. Say so once, loudly (returns the message)."""
    most = min(model.hidden_size, model.intermediate_size)
    if cfg.rank < most:
        return None
    exact = [
        name
        for name in cfg.lowrank_modules
        if (model.hidden_size if name in ("gate_proj", "up_proj") else model.intermediate_size) <= cfg.rank
    ]
    message = (
        f"method.rank={cfg.rank} >= min(hidden_size, intermediate_size) = {most} of this model: the projections "
        f"keep all {most} singular vectors, so the weight gradients of {', '.join(exact) or 'no module'} are exact "
        f"(not low-rank); for a low-rank run choose method.rank < {most}"
    )
    log.warning(message)
    return message


class Mecefo(InPlaceMethod):
    label = "MeCeFO"
    exact = False
    Config = MecefoConfig

    @classmethod
    def check_config(cls, m, cfg) -> Optional[str]:
        bad = [x for x in m.lowrank_modules if x not in FFN_MODULES]
        if bad:
            return f"method.lowrank_modules: unknown {bad}; allowed: {', '.join(FFN_MODULES)}"
        return None  # a rank above the model's widths: a warning (warn_if_rank_saturates)

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.cover: Dict[int, int] = {}  # failed worker -> its neighbour
        self.ward_of: Dict[int, int] = {}  # neighbour -> the failed worker it covers (cover, inverted)
        self.uncovered: Set[int] = set()  # down workers without a neighbour yet (kept: no walk over `down`)
        self.projections: Optional[LowRankProjections] = None
        self.degraded_steps = 0
        self.counts.update(neighbor_assignments=0, svd_refreshes=0, grad_error_checks=0)
        self._svd_step: Optional[int] = None  # the step whose plan refreshed the projections
        self._bench_projections: Dict[int, LowRankProjections] = {}

    # ------------------------------------------------------------ modes & profile
    def modes(self) -> Dict[str, Mode]:
        cfg = self.cfg
        if cfg.lowrank_ffn:
            self.projections = self._projections(self.run.model)
            warn_if_rank_saturates(cfg, self.run.model_cfg)
        contributes = (lambda name: not is_attention_parameter(name)) if cfg.skip_attention else (lambda name: True)
        # kernel names carry the switches, so a profile never mixes two configurations
        self.tag = f"[sa={int(cfg.skip_attention)},rc={int(cfg.recompute_ffn)},lr={int(cfg.lowrank_ffn)},r={cfg.rank}]"
        mode = Mode(MODE, contributes=contributes, context=self._context, kernel=f"mb:mecefo{self.tag}")
        self.pair = Help(kernel=f"neighbor_pair{self.tag}", microbatches=2)  # what a neighbour runs, for the clock
        self.svd_kernel = self.svd_kernel_name()
        return {"normal": NORMAL, MODE: mode}

    def svd_kernel_name(self) -> str:
        """The refresh's kernel: `mecefo_svd[...]` for the full SVD, `mecefo_rsvd[..,p=,q=]` for the
        randomized one (a profile or a FLOP count never mixes the two)."""
        cfg = self.cfg
        if cfg.svd == "randomized":
            return f"mecefo_rsvd{self.tag[:-1]},p={cfg.svd_oversample},q={cfg.svd_power_iters}]"
        return f"mecefo_svd{self.tag}"

    def _projections(self, model) -> LowRankProjections:
        cfg = self.cfg
        return LowRankProjections(
            model,
            cfg.rank,
            cfg.svd_every,
            cfg.lowrank_modules,
            svd=cfg.svd,
            oversample=cfg.svd_oversample,
            power_iters=cfg.svd_power_iters,
        )

    def _context(self, model):
        projections = None
        if self.cfg.lowrank_ffn:
            # the run's model: its projections, refreshed by plan() on every rank alike
            projections = self.projections if model is self.run.model else self._projections_of_copy(model)
        from ..numerics.approx import approximations  # tensors: a numerics-free run never gets here

        return approximations(model, self.cfg.skip_attention, self.cfg.recompute_ffn, projections)

    def _projections_of_copy(self, model) -> LowRankProjections:
        """The profiler's copy of the model: its own projections, computed once."""
        projections = self._bench_projections.get(id(model))
        if projections is None:
            projections = self._projections(model)
            projections.refresh(0)
            self._bench_projections[id(model)] = projections
        return projections

    def extra_kernels(self) -> Dict[str, Callable[[Any], Callable[[], None]]]:
        """The neighbour's real step (two micro-batches in the approximate mode, in one pass) and
        the projections' refresh."""
        return {f"neighbor_pair{self.tag}": self._neighbor_pair_kernel, self.svd_kernel: self._svd_kernel}

    def _neighbor_pair_kernel(self, bench) -> Callable[[], None]:
        from ..numerics.approx import approximations

        mode = bench.modes[MODE]
        projections = self._projections_of_copy(bench.model) if self.cfg.lowrank_ffn else None
        pair = [Sample(0, 0), Sample(0, 1)]

        def neighbor_pair():
            bench.model.zero_grad(set_to_none=True)
            with approximations(bench.model, self.cfg.skip_attention, self.cfg.recompute_ffn, projections):
                bench.run_mode(pair, Mode("bench", contributes=mode.contributes))

        return neighbor_pair

    def _svd_kernel(self, bench) -> Kernel:
        projections = self._projections_of_copy(bench.model) if self.cfg.lowrank_ffn else None

        def svd():
            if projections is not None:
                projections.refresh(0)

        # torch's FLOP counter does not count an SVD (nor a QR): the FLOP model uses these formulas
        # instead, a full SVD at hardware.svd_efficiency, the randomized one's GEMM work at
        # hardware.rsvd_efficiency
        return Kernel(
            svd,
            formula_flops=svd_flops(projections) if projections is not None else 0.0,
            formula_kind="randomized_svd" if self.cfg.svd == "randomized" else "svd",
        )

    def rollback_share(self, p_down: float) -> float:
        """Fatal only when every live worker already covers someone: at least half the
        ring down at once. Under independent failures that is about p_down ** (n // 2),
        which sets the Young/Daly interval of the fallback checkpoints (often: none)."""
        units = self.run.failure_units  # units of unit_gpus workers fail together
        shape = self.run.placement
        if shape is not None:  # a neighbour chain runs through one stage's slots, one per replica
            units = shape.dp
        return p_down ** max(1, units // 2)

    # ------------------------------------------------------------ membership
    def begin_without(self, workers: List[int]) -> None:
        """Slots empty when the job starts (a node trace) are covered from the first step, as failed
        workers are; when the ring cannot cover them all, the job starts on the nodes there, the
        empty slots' micro-batches re-split over them (`without`), as after a fall-back."""
        super().begin_without(workers)
        if self._ring_covers(self.down):
            self.uncovered.update(workers)
            self._assign()
        else:
            self.without = set(self.down)

    def _ring_covers(self, down) -> bool:
        """Whether `_assign` would find a neighbour for every worker of `down` (no fall-back)."""
        taken: set = set()
        for failed in sorted(down):
            ring = neighbors_on_ring(failed, self.n, self.run.placement)
            nb = next((k for k in ring if k not in down and k not in taken), None)
            if nb is None:
                return False
            taken.add(nb)
        return True

    def _fail(self, worker: int) -> None:
        """One failure of an instant: a neighbour takes its work (or the failure is fatal)."""
        self.mark_down(worker)
        if self.without:  # the job runs on the nodes a fall-back left (a node trace): it restarts there again
            return self.fall_back(worker, {"reason": "the job runs on the nodes left by a fall-back"})
        self.uncovered.add(worker)
        ward = self.ward_of.pop(worker, None)
        if ward is not None:  # the neighbour itself failed: its ward needs a new one
            del self.cover[ward]
            self.uncovered.add(ward)
        self._assign()

    def on_failures(self, workers: List[int]) -> None:
        """The failures of one instant, one by one; once one is fatal the fall-back's spares replace
        the rest of the instant too (a job-wide fault is one restart, not one per stage's replicas).
        An instant after which more workers are down than up (a job-wide fault) falls back at once:
        each neighbour covers one worker, so the one-by-one covering would end in that fall-back
        anyway, after O(workers x dp) work and as many `neighbor` rows (a node trace keeps it)."""
        node_trace = self.without or getattr(self.run.trace, "node_rows", None)
        if not node_trace and 2 * len(self.down.union(workers)) > self.n:
            super().on_failures(workers)  # marked down, as _fail does, at once
            return self.fall_back(workers[0], {"reason": "no worker is left up"})
        fatal = self.counts["fatal"]
        for i, worker in enumerate(workers):
            self._fail(worker)
            if self.counts["fatal"] > fatal:
                rest = workers[i + 1 :]
                if self.without:  # a node trace: no spares, the rest of the instant leaves with the others
                    self.down.update(rest)
                    self.without.update(rest)
                else:
                    self.replaced.update(rest)
                return

    def on_recoveries(self, workers: List[int]) -> None:
        if self.replaced.issuperset(workers):  # spares took every one's place (a fall-back): at once
            self.replaced.difference_update(workers)
        else:
            for worker in workers:
                self._recover(worker)

    def _recover(self, worker: int) -> None:
        """One recovery of an instant: its neighbour is released (a worker a spare replaced: nothing)."""
        if not self.rejoins(worker):
            return
        self.uncovered.discard(worker)
        if worker in self.cover:
            nb = self.cover.pop(worker)
            del self.ward_of[nb]
            self.run.event("neighbor_release", worker, {"neighbor": nb})
        self._assign()

    def _assign(self) -> None:
        """A neighbour for each down worker without one, lowest first: the next alive worker on the
        ring that covers nobody yet. Only the uncovered are visited, so an event costs the same
        whatever the number of workers."""
        for failed in sorted(self.uncovered & self.down):
            ring = neighbors_on_ring(failed, self.n, self.run.placement)
            nb = next((k for k in ring if k not in self.down and k not in self.ward_of), None)
            if nb is None:  # the paper defers to system-level recovery
                self.fall_back(failed, {"reason": "no eligible neighbour", "cover": dict(self.cover)})
                return
            self.cover[failed] = nb
            self.ward_of[nb] = failed
            self.uncovered.discard(failed)
            self.counts["neighbor_assignments"] += 1
            self.run.event("neighbor", failed, {"neighbor": nb})
        self.uncovered.clear()  # what is left had recovered

    def after_fall_back(self) -> None:
        self.cover.clear()
        self.ward_of.clear()
        self.uncovered.clear()

    # ------------------------------------------------------------ the step
    def plan(self, step: int) -> Plan:
        if not self.cover:
            return super().plan(step)
        if self.projections is not None and self.projections.due(step):
            # Every svd_every steps, from the current weights. Decided here, not where the
            # neighbour runs, so every torchrun rank keeps the same state and clock.
            self.projections.refresh(step, compute=self.run.numerics)
            self.counts["svd_refreshes"] += 1
            self._svd_step = step

        def changes() -> Dict[int, List[WorkItem]]:  # read by the numerics only: the clock needs the cover
            out: Dict[int, List[WorkItem]] = {w: [] for w in self.down}
            for failed, nb in self.cover.items():
                out[nb] = [WorkItem(Sample(step, nb), MODE), WorkItem(Sample(step, failed), MODE)]
            return out

        return SparsePlan(step, self.n, changes, degraded=True, cover=self.cover, n_computing=self.n - len(self.down))

    def step_cost(self, plan: Plan) -> StepCost:
        """Each neighbour runs its pair kernel (two approximate micro-batches in one pass) in place of
        its own micro-batch; no node leaves the job; an SVD refresh is whole-model work of its step."""
        if plan.cover is None:
            return super().step_cost(plan)
        costs = self.run.costs
        svd = costs.profile[self.svd_kernel] if self._svd_step == plan.step else 0.0
        return costs.step(plan, helpers={self.pair: plan.cover.values()}, slots=self.n, model_work_s=svd)

    def quiet_steps(self, plan: Plan, step_s: float) -> int:
        """Quiet until the next checkpoint and, while degraded, the next SVD refresh (a refresh
        step costs more: it is an event of its own)."""
        quiet = super().quiet_steps(plan, step_s)
        if plan.cover is not None and self.projections is not None:
            if self._svd_step == plan.step:
                return 0
            assert self.projections.refreshed_at is not None  # refreshed when the cover began (plan)
            quiet = min(quiet, self.projections.refreshed_at + self.projections.every - plan.step)
        return quiet

    def after_quiet_steps(self, plan: Plan, first: int, last: int, step_s: float) -> None:
        if plan.cover is not None:
            self.degraded_steps += last + 1 - first

    def before_optimizer(self, plan: Plan, result) -> None:
        if plan.cover is None:
            return
        self.degraded_steps += 1
        every = self.cfg.grad_error_every
        if result is not None and every and (self.degraded_steps - 1) % every == 0:
            self._log_grad_error(plan)

    # ------------------------------------------------------------ measurement
    def _log_grad_error(self, plan: Plan) -> None:
        """||g_hat - g|| / ||g|| against the exact gradient of the same micro-batches."""
        import torch

        model, cluster = self.run.model, self.run.cluster
        assert model is not None and cluster is not None  # a result to measure: numerics on
        approx = {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}
        exact_plan = Plan(plan.step, {w: [WorkItem(i.sample) for i in items] for w, items in plan.work.items()})
        with torch.random.fork_rng(devices=[]):
            cluster.execute(exact_plan)
        groups = {"all": [0.0, 0.0], "attention": [0.0, 0.0], "ffn": [0.0, 0.0], "other": [0.0, 0.0]}
        for n, p in model.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            a = approx[n]
            if a is None:
                a = torch.zeros_like(p)
            diff, ref = (a - g).pow(2).sum().item(), g.pow(2).sum().item()
            group = "attention" if is_attention_parameter(n) else "ffn" if ".mlp." in n else "other"
            for key in ("all", group):
                groups[key][0] += diff
                groups[key][1] += ref
        for n, p in model.named_parameters():  # put the approximate gradient back
            p.grad = approx[n]
        row: Dict[str, Optional[float]] = {
            "step": plan.step,
            "sim_time_s": self.run.clock.now,
            "workers_down": len(self.down),
        }
        row.update(
            {
                f"rel_error{'' if k == 'all' else '_' + k}": (d**0.5) / (r**0.5) if r > 0 else None
                for k, (d, r) in groups.items()
            }
        )
        self.counts["grad_error_checks"] += 1
        self.run.records.append("grad_error", row)  # a run-record stream: cut back on resume like the others

    def state_dict(self) -> Dict[str, object]:
        # the projections and when they were refreshed decide every later degraded step
        # (and the svd_refreshes count): without them a resumed run refreshes at a different
        # step from other weights and is not the uninterrupted run
        state = super().state_dict()
        if self.projections is not None:
            state["projections"] = self.projections.state_dict()
        return state

    def load_state_dict(self, state: Dict[str, object]) -> None:
        state = dict(state)
        projections = state.pop("projections", None)
        if projections is not None and self.projections is not None:
            self.projections.load_state_dict(cast(Dict[str, object], projections))
        super().load_state_dict(state)
        self.ward_of = {nb: failed for failed, nb in self.cover.items()}  # derived: a checkpoint may predate it
        self.uncovered = set(self.down) - set(self.cover)

    def summary(self) -> Dict[str, object]:
        out = super().summary()
        out.update(self.counts)
        out["degraded_steps"] = self.degraded_steps
        return out


def neighbors_on_ring(worker: int, n: int, shape=None) -> Iterable[int]:
    """The other workers in ring order after `worker`: worker+1, worker+2, ... (mod n). In a hybrid
    layout (`shape`), the GPUs that hold the same weights: the same slot in the next replicas."""
    if shape is not None:
        return shape.same_slot_in_next_replicas(worker)
    return ((worker + k) % n for k in range(1, n))  # lazy: a neighbour is usually found within a few
