"""`validate`: every check a composed config must pass before any compute, each failing with one
`ConfigError` line that names the key, the bad value and what is allowed."""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from typing import Any, List

from ..registry import REGISTRY, method_class
from .schema import (MAX_WORKERS, ClusterConfig, ConfigError, DataConfig, FailureConfig,
                     HardwareConfig, LoggerConfig, ModelConfig, ParallelConfig, TrainerConfig, check_fields,
                     data_parallel_size, is_hybrid)

# -------------------------------------------------------------------------- validate
def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_interval(key: str, value: Any) -> None:
    _check(value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1),
           f"{key}={value!r}: expected 'auto' or a whole number of steps >= 1")


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
            value = (OmegaConf.select(node, key, throw_on_missing=False) if isinstance(key, str) else node[key])
            name = f"{prefix}{key}"
        if isinstance(value, (DictConfig, ListConfig)):
            _check_finite(value, f"{name}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}={value}: must be a finite number")


def validate(cfg: Any) -> None:
    """Reject values that are well typed but cannot run, with one line each."""
    _check_known_keys(cfg)
    for section in ("model", "data", "method", "failure", "cluster", "hardware", "trainer"):
        _check_finite(cfg[section], f"{section}.")
    m, d, c, f, t = cfg.model, cfg.data, cfg.cluster, cfg.failure, cfg.trainer
    for section, schema in (("model", ModelConfig), ("data", DataConfig), ("cluster", ClusterConfig),
                            ("trainer", TrainerConfig), ("logger", LoggerConfig)):
        check_fields(cfg[section], schema, section)
    kv = m.get("num_key_value_heads")
    _check(kv is None or (kv >= 1 and m.num_attention_heads % kv == 0),
           f"model.num_key_value_heads={kv}: must be >= 1 and divide model.num_attention_heads={m.num_attention_heads}")
    _check(m.hidden_size % m.num_attention_heads == 0,
           f"model.hidden_size={m.hidden_size} must be divisible by model.num_attention_heads={m.num_attention_heads}")
    _check(d.seq_len <= m.max_position_embeddings,
           f"data.seq_len={d.seq_len} exceeds model.max_position_embeddings={m.max_position_embeddings} "
           f"of model={m.name}")
    _check(d.val_path is None or bool(d.path),
           "data.val_path needs data.path (local training files); the hub's C4 brings its own validation split")
    _check(d.max_train_tokens >= 1 and d.max_val_tokens >= 1,
           f"data.max_train_tokens={d.max_train_tokens}, data.max_val_tokens={d.max_val_tokens}: must be >= 1")
    # the same test as cluster.launched_by_torchrun (config/ imports nothing of the run)
    _check(c.name != "torchrun" or ("RANK" in os.environ and "WORLD_SIZE" in os.environ),
           "cluster=torchrun needs torchrun to start the ranks: torchrun --nproc-per-node=N run.py cluster=torchrun "
           "cluster.n_workers=N ...; without torchrun use cluster=local")
    _check(c.n_workers <= MAX_WORKERS,
           f"cluster.n_workers={c.n_workers}: must be in 1..{MAX_WORKERS:,} (the largest cluster measured; a run's "
           "memory and time grow with its failures, about 250 bytes and 20-100 us an event here)")
    _check(c.profile_repeats >= 1 and c.profile_warmup >= 0,
           f"cluster.profile_repeats={c.profile_repeats}, profile_warmup={c.profile_warmup}: need repeats >= 1, warmup >= 0")
    _check(len(t.betas) == 2 and all(0.0 <= b < 1.0 for b in t.betas),
           f"trainer.betas={list(t.betas)}: need two values in [0, 1)")
    _check(t.grad_accum >= 1 and d.micro_batch % t.grad_accum == 0,
           f"trainer.grad_accum={t.grad_accum}: must be >= 1 and divide data.micro_batch={d.micro_batch} "
           f"(each chunk is micro_batch / grad_accum sequences)")
    _validate_hardware(cfg.hardware)
    h = cfg.hardware
    if _measures_this_machine(c, h):
        _check(t.numerics, f"trainer.numerics=false with hardware={h.name}: measuring this machine needs the model's "
                           "numerics; use a FLOP preset (hardware=cpu_ref, a100_32, h100_8) or cluster.profile=<file>")
        _check(h.timing_model is None or h.timing_model == m.name,
               f"hardware.timing_model={h.timing_model} with hardware={h.name}: a measured profile times the run's own "
               "model; use a FLOP preset (hardware=cpu_ref, a100_32, h100_8)")
    if not t.numerics:
        _check(not cfg.resume, "resume=true with trainer.numerics=false: a numerics-free run keeps no checkpoints "
                               "(it takes seconds: run it again)")
        _check(c.name == "local", "trainer.numerics=false runs in one process: use cluster=local")
    _validate_parallel(cfg)
    _validate_failure(f, c.n_workers)
    _validate_method(cfg)
    _validate_table_fits(cfg)
    if c.name == "torchft":
        _validate_torchft(cfg)
    else:
        _check(c.machines == 1 and c.machine_rank == 0,
               f"cluster.machines={c.machines}, cluster.machine_rank={c.machine_rank} with cluster={c.name}: one "
               "launcher per machine is cluster=torchft's (torchrun across machines: torchrun --nnodes=N)")
    if f.kill and c.name != "torchft":
        _check(c.name == "torchrun", "failure.kill=true kills real processes: it needs cluster=torchrun under torchrun "
                                     "(method=checkpoint) or cluster=torchft (any method)")
        _check(cfg.method.name == "checkpoint",
               f"failure.kill=true with method={cfg.method.name}: allowed only with method=checkpoint "
               "(in-place methods keep the dead rank's work alive, which a killed process cannot)")


def _validate_parallel(cfg: Any) -> None:
    """The layout must tile the workers: tp x pp x dp = cluster.n_workers, tp inside a node and
    dividing the heads, pp dividing the layers. The hybrid layout is a numerics-free FLOP clock; a
    failure there takes out whole tensor-parallel groups; Bamboo needs pipeline stages."""
    if cfg.get("parallel") is None:  # a stored config from before the layout existed
        return
    p, m, h, n = cfg.parallel, cfg.model, cfg.hardware, cfg.cluster.n_workers
    check_fields(p, ParallelConfig, "parallel")
    layout = f"parallel.tp={p.tp} x pp={p.pp} x dp={p.dp if p.dp is not None else 'auto'}"
    _check(n % (p.tp * p.pp) == 0, f"{layout}: tp x pp = {p.tp * p.pp} must divide cluster.n_workers={n}")
    dp = data_parallel_size(cfg)
    _check(p.tp * p.pp * dp == n, f"{layout}: tp x pp x dp = {p.tp * p.pp * dp} must equal cluster.n_workers={n}")
    if not is_hybrid(cfg):
        _check(p.microbatches == 1, f"parallel.microbatches={p.microbatches} with tp=pp=1: pure data parallelism runs "
                                    "one micro-batch per worker (accumulate with trainer.grad_accum)")
        return
    kv = m.get("num_key_value_heads") or m.num_attention_heads
    _check(m.num_attention_heads % p.tp == 0 and kv % p.tp == 0,
           f"parallel.tp={p.tp}: must divide model.num_attention_heads={m.num_attention_heads} and the key/value heads "
           f"({kv}) of model={m.name}")
    _check(h.gpus_per_node % p.tp == 0, f"parallel.tp={p.tp}: a tensor-parallel group must fit in a node (divide "
                                        f"hardware.gpus_per_node={h.gpus_per_node})")
    layers = m.num_hidden_layers
    if p.split == "even":
        _check(layers % p.pp == 0, f"parallel.pp={p.pp}: must divide model.num_hidden_layers={layers} (or "
                                   "parallel.split=llama3: first and last stage one layer fewer)")
    else:
        _check(p.pp >= 2 and (layers + 2) % p.pp == 0 and (layers + 2) // p.pp >= 2,
               f"parallel.split=llama3 with parallel.pp={p.pp}: needs pp >= 2 dividing model.num_hidden_layers + 2 = "
               f"{layers + 2} with >= 2 layers per stage")
    _check(h.compute == "flops" and cfg.cluster.profile == "auto",
           f"{layout} with hardware.compute={h.compute}: the hybrid layout is timed from FLOPs only (a FLOP preset such "
           "as hardware=h100_8, no cluster.profile)")
    _check(not cfg.trainer.numerics, f"{layout}: the hybrid layout is a clock of the failure-free step; its numerics "
                                     "are not modelled yet: trainer.numerics=false")
    _check(cfg.method.name != "bamboo" or p.pp >= 2,
           f"method=bamboo with {layout}: Bamboo's shadow is the previous pipeline stage: needs parallel.pp >= 2")
    if cfg.failure.kind in ("paper", "poisson", "field"):  # a trace file's groups are checked when it is read
        unit = cfg.failure.get("unit_gpus", 1)
        _check(unit % p.tp == 0, f"failure.unit_gpus={unit} with {layout}: a failure takes out whole tensor-parallel "
                                 f"groups (a group cannot compute without one of its GPUs): a multiple of tp={p.tp}")
    _check(cfg.trainer.grad_accum == 1, f"trainer.grad_accum={cfg.trainer.grad_accum} with {layout}: a replica's "
                                        "micro-batches are parallel.microbatches")


def _measures_this_machine(c: Any, h: Any) -> bool:
    """Whether the clock's kernel seconds are measured on this machine (not a FLOP model or a file)."""
    return c.profile == "fresh" or (c.profile == "auto" and h.compute == "profile")


def _validate_torchft(cfg: Any) -> None:
    """cluster=torchft: every process runs the same loop, so the clock must be the same
    everywhere (no machine measurement), and one process at a time writes the record."""
    c, h = cfg.cluster, cfg.hardware
    _check(c.n_workers >= 2, f"cluster.n_workers={c.n_workers} with cluster=torchft: need >= 2 workers (processes)")
    _check(cfg.trainer.numerics, "trainer.numerics=false runs in one process: use cluster=local")
    _check(not cfg.resume, "resume=true with cluster=torchft: not supported (a torchft run heals workers from live "
                           "peers; after the whole job dies, start it again)")
    _check(not _measures_this_machine(c, h), f"hardware={h.name} with cluster=torchft: each process would measure its own clock and the "
                         "workers' plans would drift apart; use a FLOP preset (hardware=cpu_ref, a100_32, h100_8) or "
                         "cluster.profile=<file>")
    _check(cfg.logger.name == "none", f"logger={cfg.logger.name} with cluster=torchft: not supported (the process that "
                                      "writes the record can change during the run); metrics.jsonl has every row")
    _check(c.backend in ("auto", "gloo", "nccl"), f"cluster.backend={c.backend!r}: allowed: auto, gloo, nccl")
    _check(c.lighthouse is None or c.lighthouse.startswith(("http://", "https://")),
           f"cluster.lighthouse={c.lighthouse!r}: give the lighthouse's address as http://host:port (or leave it "
           "unset and the run starts one on 127.0.0.1)")
    for key in ("heartbeat_timeout_ms", "join_timeout_ms", "quorum_timeout_s", "restart_timeout_s"):
        _check(c[key] > 0, f"cluster.{key}={c[key]}: must be > 0")
    _validate_machines(c)
    ckpt = cfg.method.get("backend", "torch")
    _check(ckpt == "torch", f"method.backend={ckpt} with cluster=torchft: only torch (torch.distributed.checkpoint "
                            "needs one process group over all workers, which torchft replaces with its quorum)")


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or localhost) names this machine's loopback interface."""
    import ipaddress

    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host_port(address: str, key: str) -> tuple:
    """host:port (an IPv6 host in brackets) -> (host, port), or a ConfigError naming `key`."""
    host, sep, port = str(address).rpartition(":")
    _check(bool(sep) and bool(host.strip("[]")) and port.isdigit() and 0 < int(port) < 65536,
           f"{key}={address!r}: give host:port (a port in 1..65535), e.g. node001:29510")
    return host.strip("[]"), int(port)


def _validate_machines(c: Any) -> None:
    """cluster=torchft across machines: who this launcher is, where machine 0 is, what listens where."""
    import ipaddress

    _check(c.machine_rank < c.machines,
           f"cluster.machine_rank={c.machine_rank} with cluster.machines={c.machines}: must be in 0..{c.machines - 1}")
    _check(c.n_workers % c.machines == 0 and c.n_workers // c.machines >= 1,
           f"cluster.n_workers={c.n_workers} over cluster.machines={c.machines}: every machine runs the same number "
           f"of workers, so n_workers must be a multiple of machines")
    try:
        bind = ipaddress.ip_address(c.bind)
    except ValueError:
        raise ConfigError(f"cluster.bind={c.bind!r}: give an address of this machine (127.0.0.1, the default, listens "
                          "on loopback only; an interface's address, e.g. 10.0.0.5, or 0.0.0.0 for every interface)"
                          ) from None
    # torchft 0.2.0 builds its Manager's URI as http://host:port, which an IPv6 host breaks in every worker
    ipv6 = ("an IPv6 address, which torchft 0.2.0 cannot take (its Manager's URI is http://host:port); give an "
            "IPv4 address or a host name")
    _check(bind.version == 4, f"cluster.bind={c.bind!r}: {ipv6}")
    if c.coordinator is not None:
        host, _ = split_host_port(c.coordinator, "cluster.coordinator")
        _check(":" not in host, f"cluster.coordinator={c.coordinator!r}: {ipv6}")
    _check(c.advertise is None or ":" not in str(c.advertise), f"cluster.advertise={c.advertise!r}: {ipv6}")
    _check(c.machines == 1 or c.coordinator is not None,
           f"cluster.machines={c.machines}: give cluster.coordinator=host:port, where machine 0's launcher serves the "
           "run's coordination store (every launcher and worker connects to it), e.g. cluster.coordinator=node001:29510")
    if bind.is_loopback:
        # the default: nothing is reachable from another machine, so every name the run hands out must be loopback too
        _check(c.coordinator is None or is_loopback(host),
               f"cluster.coordinator={c.coordinator} with cluster.bind={c.bind}: machine 0 listens on loopback only, "
               "so no other machine could reach it; set cluster.bind to this machine's address on the network the "
               "machines share (an explicit choice: that interface then serves the run's stores and model state)")
        _check(c.advertise is None or is_loopback(c.advertise),
               f"cluster.advertise={c.advertise} with cluster.bind={c.bind}: the servers listen on loopback only, "
               "so other machines could not reach that name; set cluster.bind to the address it resolves to")
    elif bind.is_unspecified:
        _check(c.advertise is not None,
               f"cluster.bind={c.bind} listens on every interface: also give cluster.advertise=<the name or address "
               "the other machines reach this one by>")


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
                    raise ConfigError(f"{where}: no such setting ({hint}the settings of {path or 'the top level'}: "
                                      f"{', '.join(names)})")
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
    if h.compute == "table":
        _check(h.samples_per_step >= 1, f"hardware.samples_per_step={h.samples_per_step}: must be >= 1 with compute=table")
        _check(bool(h.tables), "hardware.tables is empty: compute=table needs {method or default: {nodes: samples_per_s}}")
        for method, table in h.tables.items():
            _check(bool(table), f"hardware.tables.{method} is empty")
            for nodes, tput in table.items():
                ok = str(nodes).isdigit() and isinstance(tput, (int, float)) and math.isfinite(tput) and tput >= 0
                _check(ok, f"hardware.tables.{method}: {nodes}: {tput!r}: expected a node count and samples/s >= 0")
    _check(h.gpus >= 1 and h.gpus_per_node >= 1, f"hardware.gpus={h.gpus}, gpus_per_node={h.gpus_per_node}: must be >= 1")
    if h.timing_model is not None:
        presets = model_presets()
        _check(h.timing_model in presets, f"hardware.timing_model={h.timing_model!r}: allowed: {', '.join(presets)}")


def _validate_failure(f: Any, n_workers: int) -> None:
    check_fields(f, FailureConfig, "failure")
    _check(f.unit_gpus >= 1 and n_workers % f.unit_gpus == 0,
           f"failure.unit_gpus={f.unit_gpus}: must be >= 1 and divide cluster.n_workers={n_workers}")
    if f.kind == "paper":
        # repair=replace does not use recover_h (a spare comes after replace_s)
        for key in ("every_h",) + (("recover_h",) if f.repair != "replace" else ()):
            _check(f[key] is not None and f[key] > 0, f"failure.{key}={f[key]}: must be > 0 hours")
        _check(f.paper_workers >= 1, f"failure.paper_workers={f.paper_workers}: must be >= 1")
    if f.kind == "field":
        from ..field_failures import TABLES

        _check(f.name in TABLES, f"failure.name={f.name!r} with failure.kind=field: allowed: {', '.join(TABLES)}")
        _check(f.every_h is not None and f.every_h > 0, f"failure.every_h={f.every_h}: must be > 0 hours")
    if f.kind == "poisson":
        _check(f.mtbf is not None and f.mtbf > 0, f"failure.mtbf={f.mtbf}: must be > 0 (mean time between failures)")
        _check(f.mttr is not None and f.mttr >= 0, f"failure.mttr={f.mttr}: must be >= 0 (mean time to repair)")
        _check(f.repair != "tick" or f.mttr > 0, "failure.repair=tick needs failure.mttr > 0 (the tick period)")
    if f.kind == "trace":
        _check(bool(f.path), "failure.path is required for failure=trace (a CSV of time,worker,event)")
        # read it now, before any compute: a NaN, infinite or negative time, an unknown event
        # or worker is one line naming the file and the line (times in any unit: the check
        # is on the numbers as written)
        from ..faults import TraceError, read_trace_csv

        try:
            read_trace_csv(f.path, n_workers, 1.0)
        except TraceError as e:
            raise ConfigError(str(e)) from None
    if f.kind == "nodes":
        _check(bool(f.path), "failure.path is required for failure=nodes (a CSV of t_ms,add|remove,name)")
        from ..faults import TraceError
        from ..node_trace import read_node_trace

        try:
            read_node_trace(f.path, n_workers, f.node_ready_s)
        except TraceError as e:
            raise ConfigError(str(e)) from None
    if f.workers is not None:
        bad = [w for w in f.workers if not 0 <= w < n_workers]
        _check(not bad, f"failure.workers={list(f.workers)}: workers {bad} do not exist (0..{n_workers - 1})")


def _validate_table_fits(cfg: Any) -> None:
    """compute=table: the method must have a table, and fit at the run's starting node count."""
    h = cfg.hardware
    if h.compute != "table":
        return
    from ..throughput import table_for

    table = table_for(h.tables, cfg.method.name, h.samples_per_step)
    _check(table is not None, f"hardware.tables has no table for method={cfg.method.name} and no default; "
                              f"tables: {', '.join(h.tables)}")
    _check(table.fits(cfg.cluster.n_workers),
           f"method={cfg.method.name} cannot run here: {table.label} is 0 (out of memory) at "
           f"{cfg.cluster.n_workers} nodes")


def _validate_method(cfg: Any) -> None:
    """The method's own settings: the rules on its fields (its class's `Config`), its interval, and
    what its class checks across fields (`check_config`), read through the registry."""
    m = cfg.method
    _check(m.name in REGISTRY, f"method.name={m.name!r}: allowed: {', '.join(REGISTRY)}")
    cls = method_class(m.name)
    check_fields(m, cls.Config, "method")
    key = getattr(cls, "interval_key", None)
    if key is not None and key in m:
        _check_interval(f"method.{key}", m[key])
    problem = cls.check_config(m, cfg)
    _check(problem is None, problem)
