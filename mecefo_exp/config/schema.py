"""The typed schemas Hydra composes conf/ onto (each field carries its rule: rules.py), and a
stored run config typed the same way (`typed_config`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from ..errors import ConfigError
from .rules import above, at_least, choices, within


@dataclass
class ModelConfig:
    name: str = MISSING
    hidden_size: int = field(default=MISSING, metadata=at_least(1))
    intermediate_size: int = field(default=MISSING, metadata=at_least(1))
    num_attention_heads: int = field(default=MISSING, metadata=at_least(1))
    num_hidden_layers: int = field(default=MISSING, metadata=at_least(1))
    num_key_value_heads: Optional[int] = None  # None: plain multi-head attention
    # None: use the tokenizer's vocabulary size. GaLore's presets pin 32000 (t5-base).
    vocab_size: Optional[int] = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    attn_implementation: str = field(default="sdpa", metadata=choices("sdpa", "eager"))


# ------------------------------------------------------------------------------ data
@dataclass
class DataConfig:
    name: str = field(default=MISSING, metadata=choices("local", "c4"))
    seq_len: int = field(default=128, metadata=at_least(2, "tokens"))
    micro_batch: int = field(default=4, metadata=at_least(1, "sequence per worker"))  # sequences per worker per step
    # share of documents held out, chosen by a hash of the text
    val_fraction: float = field(default=0.05, metadata=within(0, 1, closed=False))
    eval_blocks: int = field(default=64, metadata=at_least(0, "(0 scores all)"))  # validation blocks per evaluation
    # local corpus: texts that the Python install and `make setup` bring, no hub
    sources: List[str] = field(
        default_factory=lambda: ["pydoc_topics", "stdlib_docstrings", "lee_background", "package_docstrings"]
    )
    vocab_size: int = field(default=4096, metadata=at_least(256, "(byte-level BPE)"))  # BPE trained on the local corpus
    # c4 (or any local json/parquet text files) through the datasets library
    path: Optional[str] = None  # glob of local .json/.jsonl(.gz)/.parquet files, streamed; None: the hub id
    val_path: Optional[str] = (
        None  # glob of validation files (C4's validation shards); None: hub split, or a hash split of data.path
    )
    hub_id: str = "allenai/c4"
    hub_config: str = "en"
    text_field: str = "text"
    tokenizer: str = "t5-base"  # a hub id (needs the hub or its cache) or a local folder with tokenizer.json
    max_train_tokens: int = 20_000_000
    max_val_tokens: int = 500_000
    cache_dir: Optional[str] = None  # None: <project>/.cache


# ---------------------------------------------------------------------------- method
@dataclass
class MethodConfig:
    """What every method's settings have; each method's own dataclass (its class's `Config`, beside
    it in mecefo_exp/methods/) adds its fields and their rules."""

    name: str = MISSING
    # "module:Class", a subclass of the method's class that runs in its place (a study that replays
    # another simulator's rules: conf/scenario_method/); None: the method itself
    variant: Optional[str] = None
    variant_options: Dict[str, Any] = field(default_factory=dict)  # settings the variant reads and checks


# --------------------------------------------------------------------------- failure
@dataclass
class FailureConfig:
    """What every failure model's settings have: its kind, the unit of its times and the readings
    several models share; each model's own dataclass (its file's `Config`, in mecefo_exp/failures/)
    adds its fields and their rules, composed by the preset's kind (conf/failure/<name>.yaml)."""

    name: str = MISSING
    kind: str = field(default="none", metadata=choices("none", "paper", "poisson", "field", "trace", "nodes"))
    unit: str = field(default="hours", metadata=choices("hours", "steps", "seconds"))  # hours: paper hours
    # How to read "a failure every every_h, recovery after recover_h" (the paper is silent;
    # docs/DESIGN.md "Failure readings"):
    process: str = field(
        default="per_worker", metadata=choices("per_worker", "cluster")
    )  # per_worker: each unit fails at rate 1/(units_in_paper_cluster*every_h) | cluster: one failure every every_h somewhere
    unit_gpus: int = 1  # workers one failure takes down: 1 (a GPU) or 8 (a whole 8-GPU machine: 8 consecutive workers)
    repair: str = field(
        default="fixed", metadata=choices("fixed", "tick", "replace")
    )  # fixed: back after recover_h | tick: back at the next multiple of recover_h | replace: a spare after replace_s
    replace_s: float = field(
        default=300.0, metadata=at_least(0, "seconds")
    )  # repair=replace: seconds (paper seconds) until a spare takes the failed unit's place
    # which workers may fail (None: all); the paper's asymmetric experiment uses a subset
    workers: Optional[List[int]] = None
    horizon_factor: float = field(
        default=50.0, metadata=at_least(1)
    )  # draw the trace up to this multiple of the failure-free run
    # torchrun tier only: a failing worker's rank really dies (SIGKILL); torchrun's
    # --max-restarts brings the group back and the run resumes from its newest checkpoint
    kill: bool = False


# --------------------------------------------------------------------------- cluster
@dataclass
class ClusterConfig:
    name: str = field(default=MISSING, metadata=choices("local", "torchrun", "torchft"))
    n_workers: int = field(default=8, metadata=at_least(1))
    # torchrun: auto (nccl on GPU, gloo on CPU) | gloo | nccl
    backend: str = field(default="auto", metadata=choices("auto", "gloo", "nccl"))
    device: str = field(default="auto", metadata=choices("auto", "cpu", "cuda"))
    # local tier: micro-batches per forward (0: all of a mode at once)
    chunk_microbatches: int = field(default=0, metadata=at_least(0))
    # stalls of recovery (sources in conf/cluster/*.yaml); links and disks: conf/hardware/
    detection_s: float = field(default=30.0, metadata=at_least(0, "seconds"))
    # a hang (a whole-job fault of class `progress`) is found when a collective times out, not by the
    # heartbeat: 600 s is PyTorch's default timeout of an NCCL process group (docs/METHODS.md)
    collective_timeout_s: float = field(default=600.0, metadata=at_least(0, "seconds"))
    restart_s: float = field(default=76.0, metadata=at_least(0, "seconds"))
    reconfigure_s: float = field(default=2.0, metadata=at_least(0, "seconds"))
    # duration of the paper's run that "paper hours" are relative to
    paper_run_h: float = field(default=12.4, metadata=above(0))
    scale_stalls: bool = True
    # compute profile
    # auto: as hardware.compute says | fresh: measure this machine now, no cache |
    # a path to a profile.json: those kernel seconds (pins the clock, e.g. a GPU-measured profile)
    profile: str = "auto"
    profile_warmup: int = 2
    profile_repeats: int = 5
    # torchft tier (conf/cluster/torchft.yaml): one process per worker, torchft's quorum
    lighthouse: Optional[str] = None  # None: start one on 127.0.0.1 for this run; else its http://host:port
    heartbeat_timeout_ms: int = 1000  # the lighthouse's: a worker silent this long is out of the quorum
    join_timeout_ms: int = 30000  # the lighthouse waits this long for a heartbeating worker to join a quorum
    quorum_timeout_s: float = 120.0  # a worker gives up on a quorum after this long
    restart_timeout_s: float = 300.0  # a restarted worker must be up (imports, model, torchft) by then
    # torchft across machines (one launcher per machine; docs/TORCHFT.md, "torchft across machines")
    machines: int = field(default=1, metadata=at_least(1))  # how many launchers (machines) the run has
    machine_rank: int = field(
        default=0, metadata=at_least(0)
    )  # this launcher's machine: 0 hosts the lighthouse and store
    # machine 0's coordination store as host:port, which every machine reaches (needed when machines > 1)
    coordinator: Optional[str] = None
    # the one address this machine's servers listen on (store, lighthouse, Managers, group stores,
    # gloo): loopback unless the user names another (an interface's address, or 0.0.0.0 for all)
    bind: str = "127.0.0.1"
    advertise: Optional[str] = None  # the name the other machines reach this one by (None: the bind address)


# -------------------------------------------------------------------------- hardware
@dataclass
class HardwareConfig:
    """What the simulated clock times: a measured profile, or a FLOP model of a cluster.

    Presets in conf/hardware/ carry their sources. `compute=flops` counts each kernel's
    FLOPs with torch (mecefo_exp/timing/flops.py) and divides by peak x efficiency;
    `compute=profile` times the kernels on this machine (cached).
    """

    name: str = MISSING
    # flops | profile (measure this machine; cluster.profile says how)
    compute: str = field(default="flops", metadata=choices("flops", "profile"))
    # "package.module:Class": a clock of a study's own that prices every step in place of the kernels
    # (timing/clocks/; as method.variant names a method's class). None: data parallel or the hybrid layout
    clock: Optional[str] = None
    # read by the throughput-table clock (conf/hardware/table.yaml): a failure-free throughput per usable
    # node count, per method (`default` for the others): {method: {nodes: samples_per_s}}; 0 = out of
    # memory; a step is samples_per_step samples, in whole milliseconds where step_ms_integer
    tables: Dict[str, Any] = field(default_factory=dict)
    samples_per_step: int = 0
    step_ms_integer: bool = False
    # a checkpoint's seconds, replacing bytes / storage_GBps
    checkpoint_s: Optional[float] = field(default=None, metadata=at_least(0, "seconds"))
    peak_tflops: float = field(default=1.0, metadata=above(0))  # dense bf16 (or the preset's compute dtype) per worker
    efficiency: float = field(default=0.4, metadata=within(0, 1, closed="right"))  # MFU of the forward/backward kernels
    # calibrate=true: where `calibration` has the timed model, solve the efficiency so that the
    # failure-free step gives the paper's throughput at the paper's shape (else `efficiency`)
    calibrate: bool = False
    calibration: Dict[str, Any] = field(
        default_factory=dict
    )  # timing-model name -> {tokens_per_s, global_batch, seq_len}
    # share of peak_tflops that MeCeFO's SVD refresh reaches, by the FLOPs of its formula
    # (numerics/projections.py): a full SVD (cuSOLVER, far from matmul peak), and the randomized range
    # finder (fp32 GEMMs and thin QRs); presets cite their measurement
    svd_efficiency: float = field(default=0.02, metadata=above(0))
    rsvd_efficiency: float = field(default=0.02, metadata=above(0))
    gpus: int = 1  # workers of the preset's own cluster (the calibration shape)
    gpus_per_node: int = 1
    intra_node_GBps: float = field(default=300.0, metadata=above(0))  # per worker, one direction
    inter_node_GBps: float = field(default=25.0, metadata=above(0))  # per node, one direction
    intra_latency_s: float = field(default=5e-6, metadata=at_least(0, "seconds"))
    inter_latency_s: float = field(default=1e-5, metadata=at_least(0, "seconds"))
    hbm_GBps: float = field(
        default=2000.0, metadata=above(0)
    )  # device memory bandwidth: the optimizer step is bound by it
    host_GBps: float = field(default=25.0, metadata=above(0))  # device -> host copies (in-memory snapshots)
    storage_GBps: float = field(default=1.0, metadata=above(0))  # checkpoint writes and reads per worker
    memory_GB: float = field(default=80.0, metadata=above(0))
    grad_dtype: str = field(default="fp32", metadata=choices("fp32", "bf16"))  # the all-reduced gradient
    # bf16 (mixed precision, fp32 master weights) | fp32: activation bytes, weight copy
    compute_dtype: str = field(default="bf16", metadata=choices("fp32", "bf16"))
    # none (DDP) | optimizer (ZeRO-1) | gradients (ZeRO-2) | full (FSDP / ZeRO-3)
    shard: str = field(default="none", metadata=choices("none", "optimizer", "gradients", "full"))
    overlap: bool = True  # DDP buckets all-reduce behind backward; only what does not fit is exposed
    bucket_MB: float = field(default=25.0, metadata=above(0))  # DDP's default bucket
    # paper hours and stall seconds: real (3600 simulated s per hour) or scaled (one paper
    # hour = the run's failure-free duration / cluster.paper_run_h: a miniature's proportions)
    paper_time: str = field(default="real", metadata=choices("real", "scaled"))
    timing_model: Optional[str] = None  # model preset whose shape the clock times (None: the run's own)


# -------------------------------------------------------------------------- parallel
@dataclass
class ParallelConfig:
    """The layout of the GPUs (cluster.n_workers of them) that the clock times.

    tp = pp = 1 (the default) is pure data parallelism, the clock of the MeCeFO paper's cluster
    (comm.py, one micro-batch per worker). tp > 1 or pp > 1 is Megatron's hybrid layout, timed by
    timing/layout.py (docs/CLOCK.md "The hybrid layout clock"): tensor-parallel groups of tp GPUs
    inside a node, pp pipeline stages across nodes under the 1F1B schedule, dp replicas that
    all-reduce each stage's gradients (sharded across the replicas as hardware.shard says).
    """

    tp: int = field(default=1, metadata=at_least(1, "GPUs per tensor-parallel group"))
    pp: int = field(default=1, metadata=at_least(1, "pipeline stages"))
    dp: Optional[int] = field(default=None, metadata=at_least(1, "replicas"))  # None: n_workers / (tp x pp)
    # micro-batches of data.micro_batch sequences per replica per step (the global batch is
    # dp x microbatches x data.micro_batch sequences); pure DP accumulates with trainer.grad_accum
    microbatches: int = field(default=1, metadata=at_least(1))
    # 1f1b: PipeDream-Flush (Narayanan et al. 2021), at most pp micro-batches in flight on stage 1
    schedule: str = field(default="1f1b", metadata=choices("1f1b"))
    # layers per stage: even (pp divides the layers) | llama3 (the first and the last stage hold one
    # layer fewer, to balance the embedding and the output head; (layers + 2) / pp per other stage:
    # Llama 3 405B's 126 layers over 16 stages, "The Llama 3 Herd of Models" 2024, Section 3.3.2)
    split: str = field(default="even", metadata=choices("even", "llama3"))


# --------------------------------------------------------------------------- trainer
@dataclass
class TrainerConfig:
    max_steps: int = field(default=300, metadata=at_least(1))
    eval_every: int = field(default=50, metadata=at_least(0, "(0: only at the end)"))
    lr: float = field(default=3e-3, metadata=above(0))
    min_lr_ratio: float = field(default=0.1, metadata=within(0.0, 1.0))
    warmup_steps: int = field(default=30, metadata=at_least(0))
    # GaLore's LLaMA recipe trains without weight decay
    weight_decay: float = field(default=0.0, metadata=at_least(0))
    betas: List[float] = field(default_factory=lambda: [0.9, 0.95])
    grad_clip: float = field(default=1.0, metadata=at_least(0, "(0: no clipping)"))
    threads: int = 0  # torch intra-op threads (0: leave torch's default)
    # auto (bar on a terminal, lines otherwise) | bar | lines | none
    progress: str = field(default="auto", metadata=choices("auto", "bar", "lines", "none"))
    log_every: int = 10  # plain progress lines every N steps
    # console lines for failures, rollbacks, restarts ... per run (0: none); all are in events.jsonl
    log_events: int = field(default=100, metadata=at_least(0, "(0: no event lines)"))
    # fp32 | bf16 (autocast bf16 forward/backward, fp32 weights, optimizer state and loss) |
    # tf32 (fp32 with TensorFloat-32 matmuls: CUDA only, fp32 elsewhere)
    precision: str = field(default="fp32", metadata=choices("fp32", "bf16", "tf32"))
    # a worker's data.micro_batch sequences in grad_accum chunks of micro_batch / grad_accum
    # (the same gradient, less activation memory)
    grad_accum: int = 1
    # torch.compile the model for the micro-batches that run it unpatched (normal and forward-only
    # modes); a mode that patches module forwards at run time (MeCeFO's neighbour) runs eagerly
    compile: bool = False
    # crash safety, whatever the method's checkpoint policy: every N steps the harness writes
    # <run>/resume/step_N.pt (the newest only; not charged on the simulated clock, never a
    # rollback target) unless the method's own checkpoint is at that step (0: off)
    resume_every: int = field(default=250, metadata=at_least(0, "steps (0: off)"))
    # false: walk the trace, the methods and the clock without tensor math (the model lives
    # on the meta device); the paper's 6,000-60,000 steps at 7B take seconds
    numerics: bool = True
    # numerics-free runs only: book the steps between two events (a trace event, the method's
    # checkpoint, snapshot, SVD refresh or rebalance) at once, one metrics row per run of steps;
    # false steps one at a time, one row per step (the same summary to float rounding)
    event_driven: bool = True


@dataclass
class LoggerConfig:
    name: str = field(default="none", metadata=choices("none", "wandb"))
    project: str = "mecefo-exp"
    mode: str = field(default="offline", metadata=choices("online", "offline", "disabled"))  # wandb's
    entity: Optional[str] = None
    group: Optional[str] = None  # None: the sweep folder's name in a multirun, no group otherwise
    tags: List[str] = field(default_factory=list)  # added to method=..., failure=..., model=...


@dataclass
class Config:
    model: ModelConfig = MISSING
    data: DataConfig = MISSING
    method: MethodConfig = MISSING
    failure: FailureConfig = MISSING
    cluster: ClusterConfig = MISSING
    hardware: HardwareConfig = MISSING
    logger: LoggerConfig = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    seed: int = 0
    experiment: Optional[str] = None  # name of the experiment preset, if any
    # a scenario preset (conf/scenario/<name>.yaml): a published setup; its per-method constants are
    # in conf/scenario_method/<name>/<method>.yaml, composed after the method preset
    scenario: Dict[str, Any] = field(default_factory=lambda: {"name": None})
    # continue the run in hydra.run.dir from its newest checkpoint (after a crash or kill -9)
    resume: bool = False


#: the most workers a run may have. A numerics-free run keeps per worker only what changed (the
#: workers down, covered or carrying more), so memory and the cost of an event do not grow with the
#: workers themselves but with the failures they bring: measured here, 1,048,576 workers without
#: failures add nothing to the process's 396 MB; 262,144 workers under failure=high add 115 MB for
#: 463,669 events, about 250 bytes an event, run and trace together (BENCHMARKS.md). The trace's
#: own bytes are bounded before it is drawn (failures.TRACE_BYTES_PER_EVENT). 2^20 is the largest size
#: measured.
MAX_WORKERS = 1_048_576


#: method settings renamed since a run folder may have been written: old name -> the name now
RENAMED_METHOD_SETTINGS = {"interval": "checkpoint_interval", "checkpoint_every": "checkpoint_interval"}
#: `failure.unready_removals_fail: true` of an older version: the readiness rule that now says it
UNREADY_REMOVALS_FAIL_RULE = "mecefo_exp.replay.node_readiness:ArtifactReadiness"


def typed_config(stored: Any, source: str = "config.yaml") -> Any:
    """A run's stored config.yaml typed as Hydra types a composed config: every section on its
    schema (the method's own, from the registry), so a value of the wrong type or an unknown key
    fails here in one line, and keys the schemas gained since it was written come at their defaults
    (a folder written by an older version still resumes; a stored value always wins)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from ..failures import MODELS, failure_config
    from ..registry import REGISTRY, method_config

    schema = OmegaConf.structured(Config)
    name = OmegaConf.select(stored, "method.name")
    if name in REGISTRY:
        schema.method = OmegaConf.structured(method_config(name))
        method = stored.get("method") if hasattr(stored, "get") else None
        for old, new in RENAMED_METHOD_SETTINGS.items():  # a folder of an older version: its setting, renamed
            if method is not None and old in method and new not in method and new in schema.method:
                method[new] = method.pop(old)
    failure = stored.get("failure") if hasattr(stored, "get") else None
    if failure is not None and "unready_removals_fail" in failure:  # a folder of an older version
        if failure.pop("unready_removals_fail") and not failure.get("node_readiness"):
            failure["node_readiness"] = UNREADY_REMOVALS_FAIL_RULE
    kind = OmegaConf.select(stored, "failure.kind")
    if failure is not None and kind in MODELS:
        settings = failure_config(kind)
        schema.failure = OmegaConf.structured(settings)
        # a folder of an older version stored every kind's settings: those of the other kinds meant
        # nothing (the field names, not `in schema.failure`, which is false for a MISSING name)
        own = {f.name for f in dataclasses.fields(settings)}
        for key in [k for k in failure if k not in own]:
            failure.pop(key)
    try:
        return OmegaConf.merge(schema, stored)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"{source}: {key}: {str(e).splitlines()[0]}") from None
