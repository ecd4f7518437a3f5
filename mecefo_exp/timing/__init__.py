"""The simulated clock: what a step, a stall and a failure cost, at the miniature's scale or
the paper's.

    kernels.py  the units of work the clock charges (one micro-batch per mode, the optimizer, ...)
    profile.py  kernel seconds measured on this machine (hardware=measured; opt-in)
    flops.py    kernel seconds from FLOPs counted by torch on a shape-only model (the default)
    comm.py     the all-reduce: hierarchical, overlapped behind backward, sharded or not
    memory.py   bytes per worker: weights, gradients, optimizer state, activations per kernel
    layout.py   a hybrid TP x PP x DP layout (parallel.tp/pp > 1): its 1F1B step and memory per GPU
    clock.py    CostModel (seconds of a step) and SimClock (the clock with its breakdown)
    steps.py    the words a method describes its step in; StepCost
    clocks/     the formulas that price a step, one file per kind of clock (data parallel, hybrid
                layout, or one the config names), chosen once per run

`build_timing` picks the compute model from the config and returns the kernel seconds
(a `Profile`), the parameter count of the timed shape, and what the record shows about the
clock (FLOPs, efficiency, memory).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, cast

from ..config import data_parallel_size, is_hybrid, plain
from ..errors import ConfigError
from ..paths import conf_dir, default_cache_dir
from ..plan import FORWARD
from .clock import CATEGORIES, CostModel, SimClock, StepCost
from .clocks import named_clock
from .counts import (
    build_model_on_meta,  # noqa: F401
    cached_counts,  # noqa: F401
    counting_sources,  # noqa: F401
    parameter_count,  # noqa: F401
    shape_facts,  # noqa: F401
)
from .layout import LayoutShape, LayoutStep, layout_kernels, layout_memory, layout_step, parts_from_counts, stage_table
from .memory import worker_memory
from .profile import Profile, load_fixed, load_or_measure
from .seconds import BYTE_KERNELS, calibrate_efficiency, kernel_seconds

if TYPE_CHECKING:
    import torch

__all__ = ["CATEGORIES", "CostModel", "SimClock", "StepCost", "Profile", "Timing", "build_timing", "state_bytes"]

log = logging.getLogger(__name__)


def state_bytes(n_params: int) -> int:
    """What a checkpoint or snapshot holds: fp32 weights and AdamW's two moments."""
    return 12 * n_params


def timed_model_cfg(cfg):
    """The model whose shape the clock times: hardware.timing_model's preset, or the run's model."""
    name = cfg.hardware.timing_model
    if name is None or name == cfg.model.name:
        return cfg.model
    from omegaconf import DictConfig, OmegaConf

    from ..config import ModelConfig

    raw = cast(DictConfig, OmegaConf.load(conf_dir() / "model" / f"{name}.yaml"))  # a preset: a mapping
    raw.pop("defaults", None)
    return OmegaConf.merge(OmegaConf.structured(ModelConfig), raw)


@dataclass
class Timing:
    profile: Profile
    n_params: int  # of the timed shape
    timed_model: str
    counts: Dict[str, Dict[str, Any]]  # kernel -> flops, saved_bytes
    memory: Dict[str, object]
    info: Dict[str, object] = field(default_factory=dict)  # compute model, efficiency, ...


@dataclass
class Measuring:
    """What this process brings to a profile measured here (hardware.compute=profile, cluster.profile=
    fresh): its model and data stream (None without numerics), its device, and whether it is the rank
    that measures (under torchrun the others get rank 0's profile by broadcast)."""

    device: Optional["torch.device"] = None
    real_model: Optional["torch.nn.Module"] = None
    stream: Any = None
    is_main: bool = True


@dataclass
class TimedShape:
    """What the clock times: the model's shape (hardware.timing_model's, or the run's), its
    vocabulary and compute dtype, and the run's micro-batch shape and seed."""

    model: Any  # a ModelConfig
    vocab_size: int
    dtype: str  # "torch.bfloat16" | "torch.float32"
    micro_batch: int
    seq_len: int
    seed: int

    @property
    def n_params(self) -> int:
        return parameter_count(self.model, self.vocab_size)

    def counts(self, modes, kernels: List[str], micro_batch: int, seq_len: int, count, grad_accum: int = 1):
        """FLOP counts of `kernels` at a micro-batch shape, cached on disk (timing/counts.py);
        `count()` counts them on a miss."""
        key = {
            "model": {k: self.model[k] for k in self.model},
            "vocab": self.vocab_size,
            "dtype": self.dtype,
            "micro_batch": micro_batch,
            "seq_len": seq_len,
            "kernels": kernels,
            **({"grad_accum": grad_accum} if grad_accum > 1 else {}),
        }
        return cached_counts(key, count)


def build_timing(cfg, method, modes, vocab_size: int, here: Measuring, own_profile: Optional[Path] = None) -> Timing:
    """The kernel seconds and what the clock reports of them. `own_profile`: a resumed run's
    profile.json, which pins its clock (in place of `cluster.profile`) and its record."""
    hw = cfg.hardware
    dtype = "torch.bfloat16" if hw.compute_dtype == "bf16" else "torch.float32"
    shape = TimedShape(timed_model_cfg(cfg), vocab_size, dtype, cfg.data.micro_batch, cfg.data.seq_len, cfg.seed)
    counts = kernel_counts(cfg, method, modes, shape)
    choice = str(own_profile) if own_profile is not None else cfg.cluster.profile
    if choice not in ("auto", "fresh"):  # a profile file pins the clock
        profile, info, layout = profile_from_file(choice, counts, resumed=own_profile is not None)
    elif choice == "fresh" or hw.compute == "profile":
        profile, info, layout = measured_profile(cfg, method, modes, shape, here, choice)
    else:  # layout: a hybrid layout's step (parallel.tp or pp > 1), else None (pure data parallelism)
        profile, info, layout = profile_from_flops(cfg, modes, shape, counts)
    profile.meta["flops"] = {k: c["flops"] for k, c in counts.items()}
    memory, layout_info = worker_memory_of(cfg, method, shape.n_params, counts, layout)
    info = {"hardware": hw.name, "timed_model": shape.model.name, **info, **layout_info}
    stalls = {k: cfg.cluster[k] for k in ("detection_s", "restart_s", "reconfigure_s", "paper_run_h", "scale_stalls")}
    hardware = plain(hw)
    if hardware.get("clock") is None:  # no clock of its own: the hash the config had before it could name one
        hardware.pop("clock", None)
    info["fingerprint"] = profile.fingerprint(hardware=hardware, stalls=stalls)
    return Timing(profile, shape.n_params, shape.model.name, counts, memory, info)


def kernel_counts(cfg, method, modes, shape: TimedShape) -> Dict[str, Dict[str, Any]]:
    """FLOPs and saved activation bytes of every kernel of the run (a cache miss counts them on the
    meta device, each kernel under torch's FLOP counter)."""
    accum = cfg.trainer.grad_accum
    names = kernel_names(modes, method)

    def count():
        import torch

        from .flops import count_kernels
        from .kernels import KernelBench, build_kernels

        shape_model = build_model_on_meta(shape.model, shape.vocab_size, shape.seed, shape.dtype)
        bench = KernelBench(
            shape_model, modes, torch.device("meta"), shape.micro_batch, shape.seq_len, grad_accum=accum
        )
        kernels = build_kernels(bench, method, cfg.trainer)
        if sorted(kernels) != names:
            raise RuntimeError(
                f"kernel names {sorted(kernels)} differ from kernel_names() {names}: "
                "kernels.build_kernels and kernel_names must name the same kernels"
            )
        return count_kernels(kernels, shape_model)

    return shape.counts(modes, names, shape.micro_batch, shape.seq_len, count, grad_accum=accum)


def profile_from_file(path: str, counts, resumed: bool):
    """cluster.profile=<file>, or a resumed run's own profile.json: the file's seconds. The record
    says what made the file (a resumed run: as its first start said it)."""
    profile = load_fixed(path, [*counts, "optimizer", "state_copy", "checkpoint_save"])
    made_by = ("compute", "efficiency", "efficiency_source", "profile_file")
    info: Dict[str, object] = {"compute": "profile_file"}
    if resumed:
        info.update({k: profile.meta[k] for k in made_by if k in profile.meta})
    else:  # the seconds are the file's; what made the file is kept beside (its profile.json says the same)
        made = {k: profile.meta.pop(k) for k in made_by[:3] if k in profile.meta}
        profile.meta.update(compute="profile_file", profile_file={"path": str(path), **made})
        info["profile_file"] = profile.meta["profile_file"]
    return profile, info, None


def measured_profile(cfg, method, modes, shape: TimedShape, here: Measuring, choice: str):
    """hardware.compute=profile or cluster.profile=fresh: the kernels timed on this machine."""
    if here.real_model is None or shape.model is not cfg.model:
        raise ConfigError(
            "hardware.compute=profile times this machine's model: it needs trainer.numerics=true "
            "and no hardware.timing_model (use a FLOP preset such as hardware=a100_32)"
        )
    fresh = choice == "fresh"
    profile = (
        measure(cfg, method, modes, here.real_model, here.stream, here.device, shape.vocab_size, fresh=fresh)
        if here.is_main
        else Profile({})
    )
    return profile, {"compute": "measured"}, None


def profile_from_flops(cfg, modes, shape: TimedShape, counts):
    """The default: kernel seconds from the FLOP counts at the preset's efficiency (or one calibrated
    on the paper's Table 2 throughput); a hybrid layout's step beside them."""
    hw = cfg.hardware
    efficiency, source = hw.efficiency, "preset"
    row = hw.calibration.get(shape.model.name) if hw.calibrate else None
    n_params = shape.n_params
    if row is not None:
        per_seq = shape.counts(
            modes,
            ["mb:forward", "mb:normal"],
            1,
            row["seq_len"],
            lambda: count_forward_and_normal(
                shape.model, shape.vocab_size, shape.seed, shape.dtype, modes, 1, row["seq_len"]
            ),
        )
        grad_bytes = n_params * (2 if hw.grad_dtype == "bf16" else 4)
        efficiency = calibrate_efficiency(
            hw, row, per_seq["mb:normal"]["flops"], per_seq["mb:forward"]["flops"], n_params, grad_bytes
        )
        source = (
            f"calibrated: {row['tokens_per_s']:.0f} tokens/s failure-free at {hw.gpus} workers x "
            f"{row['global_batch'] // hw.gpus} x {row['seq_len']} (paper Table 2)"
        )
    seconds = kernel_seconds(counts, hw, efficiency, n_params, state_bytes(n_params), cfg.cluster.n_workers)
    layout: Optional[LayoutStep] = None
    if is_hybrid(cfg):  # the layout's failure-free step replaces the pure-DP one (timing/layout.py)
        layout = time_layout(cfg, shape.model, modes, shape.vocab_size, shape.dtype, efficiency)
        seconds.update(layout_kernels(layout))
    meta = {
        "compute": "flops",
        "hardware": hw.name,
        "timed_model": shape.model.name,
        "micro_batch": shape.micro_batch,
        "seq_len": shape.seq_len,
        "efficiency": efficiency,
        "efficiency_source": source,
        "peak_tflops": hw.peak_tflops,
    }
    info: Dict[str, object] = {"compute": "flops", "efficiency": efficiency, "efficiency_source": source}
    named = named_clock(hw)
    if named is not None:  # a clock of its own prices the steps; the kernels still time checkpoints and copies
        info.update(named.INFO)
    return Profile(seconds, meta, None), info, layout


def worker_memory_of(cfg, method, n_params: int, counts, layout: Optional[LayoutStep]):
    """A worker's memory (weights, gradients, optimizer state, activations), and in a hybrid layout
    each GPU's with the layout's own record (`{"layout": ...}`; empty in pure data parallelism)."""
    hw, n = cfg.hardware, cfg.cluster.n_workers
    if layout is None:
        pair = next((k for k in counts if k.startswith("neighbor_pair")), None)
        saved = counts[pair]["saved_bytes"] if pair else None
        return worker_memory(n_params, hw, n, counts["mb:normal"]["saved_bytes"], saved), {}
    memory = layout_memory(layout, hw, layout["dp"], shadow_next_stage=method.holds_next_stage)
    layout_info: Dict[str, object] = {
        "tp": layout["tp"],
        "pp": layout["pp"],
        "dp": layout["dp"],
        "microbatches": layout["microbatches"],
        "schedule": layout["schedule"],
        "stage_layers": layout["stage_layers"],
        "step_s": layout["step_s"],
        "pipeline_s": layout["pipeline_s"],
        "bubble_s": layout["bubble_s"],
        "bubble_fraction": layout["bubble_fraction"],
    }
    layout_info.update(
        stages=stage_table(layout),
        flops_per_gpu_step=layout["microbatches"] * counts["mb:normal"]["flops"] / (layout["tp"] * layout["pp"]),
    )
    return memory, {"layout": layout_info}


def kernel_names(modes, method) -> List[str]:
    """The kernels a profile holds (kernels.build_kernels builds them), named without building any."""
    return sorted({mode.kernel for mode in modes.values()} | {FORWARD.kernel, *BYTE_KERNELS, *method.extra_kernels()})


def count_forward_and_normal(
    model_cfg, vocab_size: int, seed: int, dtype: str, modes, micro_batch: int, seq_len: int
) -> Dict[str, Dict[str, Any]]:
    """FLOP counts of one normal and one forward-only micro-batch of a shape (a cache miss)."""
    import torch

    from .flops import count_kernels
    from .kernels import KernelBench, micro_batch_kernel

    model = build_model_on_meta(model_cfg, vocab_size, seed, dtype)
    bench = KernelBench(model, modes, torch.device("meta"), micro_batch, seq_len)
    return count_kernels(
        {"mb:normal": micro_batch_kernel(bench, modes["normal"]), "mb:forward": micro_batch_kernel(bench, FORWARD)},
        model,
    )


def layout_shape(cfg) -> Optional[LayoutShape]:
    """Where each GPU sits in a hybrid layout (None for pure data parallelism)."""
    if not is_hybrid(cfg):
        return None
    return LayoutShape(tp=cfg.parallel.tp, pp=cfg.parallel.pp, dp=data_parallel_size(cfg))


def time_layout(cfg, model_cfg, modes, vocab_size: int, dtype: str, efficiency: float) -> LayoutStep:
    """The hybrid layout's step (timing/layout.py) from one layer's counts: models of one and of
    two layers are counted on the meta device, their difference is a layer (all layers have the
    same shape), the rest the embedding and head. A 126-layer 405B shape is thus counted as two
    small models, not as the whole stack."""
    from omegaconf import DictConfig, OmegaConf

    d = cfg.data
    counts, params = {}, {}
    for n_layers in (1, 2):
        small = cast(DictConfig, OmegaConf.merge(model_cfg, {"num_hidden_layers": n_layers}))
        facts = shape_facts(small, vocab_size)
        params[n_layers], embed = facts["n_params"], facts["embedding"]
        counts[n_layers] = cached_counts(
            {
                "model": {k: small[k] for k in small},
                "vocab": vocab_size,
                "dtype": dtype,
                "micro_batch": d.micro_batch,
                "seq_len": d.seq_len,
                "kernels": ["mb:forward", "mb:normal"],
            },
            lambda: count_forward_and_normal(small, vocab_size, cfg.seed, dtype, modes, d.micro_batch, d.seq_len),  # noqa: B023 (called here)
        )
    parts = parts_from_counts(counts[1], counts[2], params[1], params[2], embed)
    parallel = dict(plain(cfg.parallel), dp=data_parallel_size(cfg))
    return layout_step(
        parts,
        model_cfg.num_hidden_layers,
        cfg.hardware,
        parallel,
        efficiency,
        d.micro_batch,
        d.seq_len,
        model_cfg.hidden_size,
    )


def measure(cfg, method, modes, real_model, stream, device, vocab_size: int, fresh: bool) -> Profile:
    """Time the kernels on a copy of the model (the training state is untouched), cached."""
    import torch

    from .kernels import KernelBench, build_kernels
    from .profile import machine_meta

    t = cfg.trainer
    bench = KernelBench(
        copy.deepcopy(real_model),
        modes,
        device,
        cfg.data.micro_batch,
        cfg.data.seq_len,
        stream,
        grad_accum=t.grad_accum,
        precision=t.precision,
    )
    kernels = build_kernels(bench, method, cfg.trainer)
    m = cfg.model
    meta = {
        "model": {k: m[k] for k in m},
        "vocab": vocab_size,
        "micro_batch": cfg.data.micro_batch,
        "seq_len": cfg.data.seq_len,
        **machine_meta(device),
        # only where not the default, so that existing cached profiles stay valid
        **({"grad_accum": t.grad_accum} if t.grad_accum > 1 else {}),
        **({"precision": t.precision} if t.precision != "fp32" else {}),
    }
    with torch.random.fork_rng(devices=[]):
        return load_or_measure(
            kernels,
            meta,
            default_cache_dir() / "profiles",
            cfg.cluster.profile_warmup,
            cfg.cluster.profile_repeats,
            device,
            use_cache=not fresh,
        )
