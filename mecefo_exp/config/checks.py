"""`validate`: every check a composed config must pass before any compute, each failing with one
`ConfigError` line that names the key, the bad value and what is allowed."""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any, List

from ..errors import ConfigError
from ..methods.setting_roles import CHECKPOINT_INTERVAL
from ..registry import REGISTRY, method_class, tier_checks
from .implied import data_parallel_size, is_hybrid
from .rules import check_fields
from .schema import (
    MAX_WORKERS,
    ClusterConfig,
    DataConfig,
    FailureConfig,
    HardwareConfig,
    LoggerConfig,
    ModelConfig,
    ParallelConfig,
    TrainerConfig,
)


# -------------------------------------------------------------------------- validate
def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_interval(key: str, value: Any) -> None:
    require(
        value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1),
        f"{key}={value!r}: expected 'auto' or a whole number of steps >= 1",
    )


def _check_finite(node: Any, prefix: str = "") -> None:
    """No setting is NaN or infinite: such a value passes every bound test and then misbehaves."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    # a dict-valued setting may have keys that are not strings ({30: 1e400}), which select() cannot
    # name; a list's items are checked as well
    items = enumerate(node) if isinstance(node, ListConfig) else ((key, None) for key in node)
    for key, item in items:
        if isinstance(node, ListConfig):
            value, name = item, f"{prefix[:-1]}[{key}]"
        else:
            value = OmegaConf.select(node, key, throw_on_missing=False) if isinstance(key, str) else node[key]
            name = f"{prefix}{key}"
        if isinstance(value, (DictConfig, ListConfig)):
            _check_finite(value, f"{name}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}={value}: must be a finite number")


#: the largest seed: every generator seeded from it (torch's, the data order's seed x 1,000,003 +
#: epoch) stays within the 64 bits torch accepts
MAX_SEED = 2**32 - 1


def validate(cfg: Any) -> None:
    """Reject values that are well typed but cannot run, with one line each."""
    _check_known_keys(cfg)
    seed = cfg.get("seed")
    require(
        isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED,
        f"seed={seed}: must be a whole number in 0..{MAX_SEED:,} (2^32 - 1)",
    )
    for section in ("model", "data", "method", "failure", "cluster", "hardware", "trainer"):
        _check_finite(cfg[section], f"{section}.")
    m, d, c, f, t = cfg.model, cfg.data, cfg.cluster, cfg.failure, cfg.trainer
    for section, schema in (
        ("model", ModelConfig),
        ("data", DataConfig),
        ("cluster", ClusterConfig),
        ("trainer", TrainerConfig),
        ("logger", LoggerConfig),
    ):
        check_fields(cfg[section], schema, section)
    kv = m.get("num_key_value_heads")
    require(
        kv is None or (kv >= 1 and m.num_attention_heads % kv == 0),
        f"model.num_key_value_heads={kv}: must be >= 1 and divide model.num_attention_heads={m.num_attention_heads}",
    )
    require(
        m.hidden_size % m.num_attention_heads == 0,
        f"model.hidden_size={m.hidden_size} must be divisible by model.num_attention_heads={m.num_attention_heads}",
    )
    require(
        d.seq_len <= m.max_position_embeddings,
        f"data.seq_len={d.seq_len} exceeds model.max_position_embeddings={m.max_position_embeddings} of model={m.name}",
    )
    require(
        d.val_path is None or bool(d.path),
        "data.val_path needs data.path (local training files); the hub's C4 brings its own validation split",
    )
    require(
        d.max_train_tokens >= 1 and d.max_val_tokens >= 1,
        f"data.max_train_tokens={d.max_train_tokens}, data.max_val_tokens={d.max_val_tokens}: must be >= 1",
    )
    require(
        c.n_workers <= MAX_WORKERS,
        f"cluster.n_workers={c.n_workers}: must be in 1..{MAX_WORKERS:,} (the largest cluster measured; a run's "
        "memory and time grow with its failures, about 250 bytes and 20-100 us an event here)",
    )
    require(
        c.profile_repeats >= 1 and c.profile_warmup >= 0,
        f"cluster.profile_repeats={c.profile_repeats}, profile_warmup={c.profile_warmup}: need repeats >= 1, warmup >= 0",
    )
    require(
        len(t.betas) == 2 and all(0.0 <= b < 1.0 for b in t.betas),
        f"trainer.betas={list(t.betas)}: need two values in [0, 1)",
    )
    require(
        t.grad_accum >= 1 and d.micro_batch % t.grad_accum == 0,
        f"trainer.grad_accum={t.grad_accum}: must be >= 1 and divide data.micro_batch={d.micro_batch} "
        f"(each chunk is micro_batch / grad_accum sequences)",
    )
    _validate_hardware(cfg.hardware)
    h = cfg.hardware
    if measures_this_machine(c, h):
        require(
            t.numerics,
            f"trainer.numerics=false with hardware={h.name}: measuring this machine needs the model's "
            "numerics; use a FLOP preset (hardware=cpu_ref, a100_32, h100_8) or cluster.profile=<file>",
        )
        require(
            h.timing_model is None or h.timing_model == m.name,
            f"hardware.timing_model={h.timing_model} with hardware={h.name}: a measured profile times the run's own "
            "model; use a FLOP preset (hardware=cpu_ref, a100_32, h100_8)",
        )
    if not t.numerics:
        require(
            not cfg.resume,
            "resume=true with trainer.numerics=false: a numerics-free run keeps no checkpoints "
            "(it takes seconds: run it again)",
        )
        require(c.name == "local", "trainer.numerics=false runs in one process: use cluster=local")
    _validate_parallel(cfg)
    _validate_failure(f, c.n_workers)
    _validate_method(cfg)
    tier_checks(c.name)(cfg)  # the settings only cluster=<name>'s tier has
    if c.name != "torchft":
        require(
            c.machines == 1 and c.machine_rank == 0,
            f"cluster.machines={c.machines}, cluster.machine_rank={c.machine_rank} with cluster={c.name}: one "
            "launcher per machine is cluster=torchft's (torchrun across machines: torchrun --nnodes=N)",
        )
    if f.kill and c.name != "torchft":
        require(
            c.name == "torchrun",
            "failure.kill=true kills real processes: it needs cluster=torchrun under torchrun "
            "(method=checkpoint) or cluster=torchft (any method)",
        )
        require(
            cfg.method.name == "checkpoint",
            f"failure.kill=true with method={cfg.method.name}: allowed only with method=checkpoint "
            "(in-place methods keep the dead rank's work alive, which a killed process cannot)",
        )


def _validate_parallel(cfg: Any) -> None:
    """The layout must tile the workers: tp x pp x dp = cluster.n_workers, tp inside a node and
    dividing the heads, pp dividing the layers. The hybrid layout is a numerics-free FLOP clock; a
    failure there takes out whole tensor-parallel groups. (A method's own needs of the layout are its
    class's `check_config`.)"""
    if cfg.get("parallel") is None:  # a stored config from before the layout existed
        return
    p, m, h, n = cfg.parallel, cfg.model, cfg.hardware, cfg.cluster.n_workers
    check_fields(p, ParallelConfig, "parallel")
    layout = f"parallel.tp={p.tp} x pp={p.pp} x dp={p.dp if p.dp is not None else 'auto'}"
    require(n % (p.tp * p.pp) == 0, f"{layout}: tp x pp = {p.tp * p.pp} must divide cluster.n_workers={n}")
    dp = data_parallel_size(cfg)
    require(p.tp * p.pp * dp == n, f"{layout}: tp x pp x dp = {p.tp * p.pp * dp} must equal cluster.n_workers={n}")
    if not is_hybrid(cfg):
        require(
            p.microbatches == 1,
            f"parallel.microbatches={p.microbatches} with tp=pp=1: pure data parallelism runs "
            "one micro-batch per worker (accumulate with trainer.grad_accum)",
        )
        return
    kv = m.get("num_key_value_heads") or m.num_attention_heads
    require(
        m.num_attention_heads % p.tp == 0 and kv % p.tp == 0,
        f"parallel.tp={p.tp}: must divide model.num_attention_heads={m.num_attention_heads} and the key/value heads "
        f"({kv}) of model={m.name}",
    )
    require(
        h.gpus_per_node % p.tp == 0,
        f"parallel.tp={p.tp}: a tensor-parallel group must fit in a node (divide "
        f"hardware.gpus_per_node={h.gpus_per_node})",
    )
    layers = m.num_hidden_layers
    if p.split == "even":
        require(
            layers % p.pp == 0,
            f"parallel.pp={p.pp}: must divide model.num_hidden_layers={layers} (or "
            "parallel.split=llama3: first and last stage one layer fewer)",
        )
    else:
        require(
            p.pp >= 2 and (layers + 2) % p.pp == 0 and (layers + 2) // p.pp >= 2,
            f"parallel.split=llama3 with parallel.pp={p.pp}: needs pp >= 2 dividing model.num_hidden_layers + 2 = "
            f"{layers + 2} with >= 2 layers per stage",
        )
    require(
        h.compute == "flops" and cfg.cluster.profile == "auto",
        f"{layout} with hardware.compute={h.compute}: the hybrid layout is timed from FLOPs only (a FLOP preset such "
        "as hardware=h100_8, no cluster.profile)",
    )
    require(
        not cfg.trainer.numerics,
        f"{layout}: the hybrid layout is a clock of the failure-free step; its numerics "
        "are not modelled yet: trainer.numerics=false",
    )
    if cfg.failure.kind in ("paper", "poisson", "field"):  # a trace file's groups are checked when it is read
        unit = cfg.failure.get("unit_gpus", 1)
        require(
            unit % p.tp == 0,
            f"failure.unit_gpus={unit} with {layout}: a failure takes out whole tensor-parallel "
            f"groups (a group cannot compute without one of its GPUs): a multiple of tp={p.tp}",
        )
    require(
        cfg.trainer.grad_accum == 1,
        f"trainer.grad_accum={cfg.trainer.grad_accum} with {layout}: a replica's "
        "micro-batches are parallel.microbatches",
    )


def measures_this_machine(c: Any, h: Any) -> bool:
    """Whether the clock's kernel seconds are measured on this machine (not a FLOP model or a file)."""
    return c.profile == "fresh" or (c.profile == "auto" and h.compute == "profile")


def _check_known_keys(cfg: Any) -> None:
    """A key that no schema declares (e.g. `+trainer.max_step=20`, which Hydra's own hint
    suggests typing after a typo) would be stored and ignored: refuse it, naming the nearest
    real key. Only typed nodes are checked (a config loaded back from YAML has no types)."""
    from omegaconf import DictConfig, OmegaConf

    def walk(node: Any, path: str) -> None:
        schema = OmegaConf.get_type(node)
        if dataclasses.is_dataclass(schema):
            names = [f.name for f in dataclasses.fields(schema)]
            for key in node.keys():
                if key not in names:
                    where = f"{path}.{key}" if path else str(key)
                    near = difflib.get_close_matches(str(key), names, n=1)
                    hint = f"did you mean {path + '.' if path else ''}{near[0]}? " if near else ""
                    raise ConfigError(
                        f"{where}: no such setting ({hint}the settings of {path or 'the top level'}: "
                        f"{', '.join(names)})"
                    )
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, DictConfig):
                walk(child, f"{path}.{key}" if path else str(key))

    if isinstance(cfg, DictConfig):
        walk(cfg, "")


def model_presets() -> List[str]:
    from ..paths import conf_dir

    return sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml"))


def _validate_hardware(h: Any) -> None:
    check_fields(h, HardwareConfig, "hardware")
    require(
        h.gpus >= 1 and h.gpus_per_node >= 1, f"hardware.gpus={h.gpus}, gpus_per_node={h.gpus_per_node}: must be >= 1"
    )
    if h.timing_model is not None:
        presets = model_presets()
        require(h.timing_model in presets, f"hardware.timing_model={h.timing_model!r}: allowed: {', '.join(presets)}")


def _validate_failure(f: Any, n_workers: int) -> None:
    from omegaconf import OmegaConf

    from ..failures import MODELS, check_failure, failure_config

    require(f.kind in MODELS, f"failure.kind={f.kind!r}: allowed: {', '.join(MODELS)}")
    schema, typed = failure_config(f.kind), OmegaConf.get_type(f)
    require(
        typed in (None, dict, FailureConfig, schema),
        f"failure.kind={f.kind} on a preset of another kind ({getattr(typed, '__module__', typed)}): choose the "
        f"kind by its preset (failure=<name>, conf/failure/), not by failure.kind",
    )
    check_fields(f, schema, "failure")
    require(
        f.unit_gpus >= 1 and n_workers % f.unit_gpus == 0,
        f"failure.unit_gpus={f.unit_gpus}: must be >= 1 and divide cluster.n_workers={n_workers}",
    )
    problem = check_failure(f, n_workers)  # the failure model's own settings (mecefo_exp/failures/<kind>.py)
    if problem is not None:
        raise ConfigError(problem)
    if f.workers is not None:
        bad = [w for w in f.workers if not 0 <= w < n_workers]
        require(not bad, f"failure.workers={list(f.workers)}: workers {bad} do not exist (0..{n_workers - 1})")


def _validate_method(cfg: Any) -> None:
    """The method's own settings: the rules on its fields (its class's `Config`), its interval, and
    what its class checks across fields (`check_config`), read through the registry."""
    m = cfg.method
    require(m.name in REGISTRY, f"method.name={m.name!r}: allowed: {', '.join(REGISTRY)}")
    cls = method_class(m.name)
    check_fields(m, cls.Config, "method")
    if CHECKPOINT_INTERVAL in m:
        _check_interval(f"method.{CHECKPOINT_INTERVAL}", m[CHECKPOINT_INTERVAL])
    problem = cls.check_config(m, cfg)
    if problem is not None:
        raise ConfigError(problem)
