"""The failure-free step and the memory per GPU of a hybrid layout: TP x PP x DP under 1F1B.

Megatron-LM's layout (Shoeybi et al. 2019; Narayanan et al., SC 2021): stages split the layers,
tensor parallelism splits a stage inside a node, data parallelism replicates the pipeline; a step
of m micro-batches takes (m + p - 1) x the slowest stage's micro-batch time. A degraded step slows
the stages a failure's helpers sit on, or spreads the batch over fewer GPUs; Bamboo's redundant
forwards fill the 1F1B idle slots. docs/CLOCK.md ("The hybrid layout clock: the model") has every
rule, its source and what is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Sequence, TypedDict

from ..config import AttrDict, plain, stage_layers
from .comm import exposed_comm_s
from .memory import worker_memory
from .seconds import optimizer_s

#: Megatron's tensor-parallel all-reduces per layer and micro-batch (Shoeybi et al. 2019, Section 3:
#: the f and g operators, one pair in the attention block and one in the MLP; each all-reduces in
#: one direction: g in forward, f in backward)
TP_ALLREDUCES_PER_LAYER = 4


@dataclass(frozen=True)
class LayerParts:
    """One micro-batch of the timed shape, cut into a transformer layer and the rest.

    flops: forward + backward; forward_flops: forward only; saved: bytes autograd keeps for
    backward; params: parameters. `rest_*`: the embedding, final norm, output head and loss."""

    layer_flops: float
    layer_forward_flops: float
    layer_saved: float
    layer_params: int
    rest_flops: float
    rest_forward_flops: float
    rest_saved: float
    embed_params: int
    head_params: int  # output head and final norm


class StageRow(TypedDict):
    """One pipeline stage of a layout's step: one micro-batch's seconds on one GPU (the DP
    exchange and the optimizer: once a step), its parameters and in-flight activations."""

    layers: int
    params_per_gpu: float
    compute_s: float
    tp_comm_s: float
    p2p_s: float
    backward_s: float
    dp_comm_s: float
    optimizer_s: float
    saved_bytes: float
    in_flight: int


class LayoutStep(TypedDict):
    """The failure-free step of a hybrid layout (`layout_step`), as summary.json keeps it."""

    compute_s: float
    comm_s: float
    step_s: float
    pipeline_s: float
    bubble_s: float
    bubble_fraction: float
    slot_s: float
    stage_layers: List[int]
    stages: List[StageRow]
    tp: int
    pp: int
    dp: int
    microbatches: int
    schedule: str


def ring_allreduce_s(nbytes: float, n: int, GBps: float, latency_s: float) -> float:
    """A ring all-reduce of `nbytes` among `n` GPUs on one link kind (comm.py's formula, one level)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (GBps * 1e9) + 2 * (n - 1) * latency_s


def layout_step(
    parts: LayerParts, n_layers: int, hw, parallel, efficiency: float, micro_batch: int, seq_len: int, hidden: int
) -> LayoutStep:
    """Seconds of one failure-free step of the layout, and what makes them (module doc)."""
    hw = plain(hw)
    tp, pp, dp, m = parallel["tp"], parallel["pp"], parallel["dp"], parallel["microbatches"]
    layers = stage_layers(n_layers, pp, parallel.get("split", "even"))
    flop_s = hw.peak_tflops * 1e12 * efficiency
    act_bytes = micro_batch * seq_len * hidden * (2 if hw.compute_dtype == "bf16" else 4)
    tp_allreduce = ring_allreduce_s(act_bytes, tp, hw.intra_node_GBps, hw.intra_latency_s)
    # one way, one boundary: the node's link carries the whole activation (scatter/gather over tp)
    p2p = act_bytes / (hw.inter_node_GBps * 1e9) + hw.inter_latency_s if pp > 1 else 0.0
    # the dp peers of one GPU: g / tp share its node; the node's link is shared by its tp groups
    dp_hw = AttrDict(hw, gpus_per_node=max(1, hw.gpus_per_node // tp), inter_node_GBps=hw.inter_node_GBps / tp)
    grad_per_param = 2 if hw.grad_dtype == "bf16" else 4
    stages: List[StageRow] = []
    for i, n in enumerate(layers):
        first, last = i == 0, i == pp - 1
        flops = n * parts.layer_flops + (parts.rest_flops if last else 0.0)
        forward = n * parts.layer_forward_flops + (parts.rest_forward_flops if last else 0.0)
        params = n * parts.layer_params + (parts.embed_params if first else 0) + (parts.head_params if last else 0)
        compute = flops / tp / flop_s
        tp_comm = (TP_ALLREDUCES_PER_LAYER * n + (1 if first and tp > 1 else 0)) * tp_allreduce
        backward = (flops - forward) / tp / flop_s
        gpu_params = params / tp
        stages.append(
            {
                "layers": n,
                "params_per_gpu": gpu_params,
                "compute_s": compute,
                "tp_comm_s": tp_comm,
                "p2p_s": 2 * p2p,  # a micro-batch: its activation forward, its gradient backward
                "backward_s": backward,
                "dp_comm_s": exposed_comm_s(gpu_params * grad_per_param, dp, dp_hw, backward),
                "optimizer_s": optimizer_s(gpu_params, hw, dp),
                "saved_bytes": n * parts.layer_saved + (parts.rest_saved if last else 0.0),
                "in_flight": min(m, pp - i),
            }
        )
    # 1F1B: m + p - 1 slots of the slowest stage's micro-batch (forward + backward + its sends)
    slot = max(stages, key=lambda s: s["compute_s"] + s["tp_comm_s"] + s["p2p_s"])
    slot_s = slot["compute_s"] + slot["tp_comm_s"] + slot["p2p_s"]
    slots = m + pp - 1
    tail = max(stages, key=lambda s: s["dp_comm_s"] + s["optimizer_s"])
    compute = slots * slot["compute_s"] + tail["optimizer_s"]
    comm = slots * (slot["tp_comm_s"] + slot["p2p_s"]) + tail["dp_comm_s"]
    return {
        "compute_s": compute,
        "comm_s": comm,
        "step_s": compute + comm,
        "pipeline_s": slots * slot_s,
        "bubble_s": (pp - 1) * slot_s,
        "bubble_fraction": (pp - 1) / slots,
        "slot_s": slot_s,
        "stage_layers": layers,
        "stages": stages,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "microbatches": m,
        "schedule": parallel.get("schedule", "1f1b"),
    }


def layout_kernels(step: LayoutStep) -> Dict[str, float]:
    """What the clock keeps of the layout's step (profile kernels, hence in the clock's
    fingerprint): the failure-free compute and comm, the pipeline's slots, each stage's micro-batch
    time (compute + TP all-reduces + sends) and the bubble."""
    out = {
        "layout:compute": step["compute_s"],
        "layout:comm": step["comm_s"],
        "layout:slots": float(step["microbatches"] + step["pp"] - 1),
        "layout:bubble": step["bubble_s"],
    }
    for i, s in enumerate(step["stages"]):
        out[f"layout:stage{i}"] = s["compute_s"] + s["tp_comm_s"] + s["p2p_s"]
        # its forward alone (compute and the forward's half of the TP all-reduces): what Bamboo's
        # previous stage runs again as its redundant computation
        out[f"layout:forward{i}"] = s["compute_s"] - s["backward_s"] + s["tp_comm_s"] / 2
    return out


def _stage_times(kernels: Dict[str, float], prefix: str) -> List[float]:
    return [kernels[f"layout:{prefix}{i}"] for i in range(sum(k.startswith("layout:stage") for k in kernels))]


def redundant_forward_s(kernels: Dict[str, float]) -> float:
    """Seconds Bamboo's redundant computation adds to a failure-free step (module doc): stage i
    runs stage i+1's forward (the last stage: the first's) for each of the m micro-batches in the
    time its own 1F1B schedule leaves idle, (m + p - 1) x the slowest stage's slot less m x its
    own; the step grows by the largest part that does not fit."""
    stages, forwards = _stage_times(kernels, "stage"), _stage_times(kernels, "forward")
    p = len(stages)
    slots = kernels["layout:slots"]
    m = slots - p + 1
    pipeline = slots * max(stages)
    return max(0.0, max(m * forwards[(i + 1) % p] - (pipeline - m * stages[i]) for i in range(p)))


def shadow_factor(kernels: Dict[str, float], stage: int) -> float:
    """How much longer a slot of `stage` runs each micro-batch while it also does the next stage's
    work (Bamboo's shadow after a failure): both stages' micro-batch time over its own."""
    stages = _stage_times(kernels, "stage")
    return (stages[stage] + stages[(stage + 1) % len(stages)]) / stages[stage]


@dataclass(frozen=True)
class LayoutShape:
    """Where a GPU sits in the layout, in Megatron-LM's rank order (tensor parallelism innermost,
    then data parallelism, then pipeline stages): GPU g is tensor rank g % tp of replica
    (g // tp) % dp on stage g // (tp x dp). With tp = hardware.gpus_per_node a node is one
    tensor-parallel group, i.e. one (stage, replica) slot."""

    tp: int
    pp: int
    dp: int

    def stage(self, gpu: int) -> int:
        return gpu // (self.tp * self.dp)

    def replica(self, gpu: int) -> int:
        return (gpu // self.tp) % self.dp

    def replica_chains(self) -> List[List[int]]:
        """For every (stage, tensor rank), its GPUs in replica order: the GPUs that hold the same
        weights, one per replica (REFT's parity groups run along them)."""
        return [
            [stage * self.tp * self.dp + r * self.tp + t for r in range(self.dp)]
            for stage in range(self.pp)
            for t in range(self.tp)
        ]

    def same_slot_in_next_replicas(self, gpu: int) -> Iterator[int]:
        """The GPU at the same tensor rank and stage in replicas r+1, r+2, ... (mod dp): MeCeFO's
        neighbours in a layout (the adjacent data-parallel replica holds the same weights). Lazy:
        a neighbour is usually found within a few."""
        base = self.stage(gpu) * self.tp * self.dp + gpu % self.tp
        r, dp, tp = self.replica(gpu), self.dp, self.tp
        return (base + ((r + k) % dp) * tp for k in range(1, dp))


def degraded_pipeline_s(kernels: Dict[str, float], stage_factor: Dict[int, float], share: float = 1.0) -> float:
    """Seconds the pipeline part of a degraded step takes beyond the failure-free one (module doc):
    `stage_factor[i]` the largest factor of any slot on stage i (1 if absent), `share` n / alive."""
    slots = kernels["layout:slots"]
    stages = _stage_times(kernels, "stage")
    normal = max(stages)
    if not stage_factor and share == 1.0:
        return 0.0
    slowest = max(t * stage_factor.get(i, 1.0) for i, t in enumerate(stages))
    return max(0.0, slots * (share * slowest - normal))


def layout_memory(step: LayoutStep, hw, dp: int, shadow_next_stage: bool = False) -> Dict[str, Any]:
    """Memory per GPU: each stage's static state (memory.py) and its in-flight activations; the
    peak stage is the GPU's figure, with the `fits` flag against hardware.memory_GB.
    `shadow_next_stage` (Bamboo): each stage also holds the next stage's weights and optimizer
    state (no gradients; its redundant forward's activations are not counted: `shadow_GB`)."""
    per_stage = []
    stages = step["stages"]
    for i, s in enumerate(stages):
        tp = step["tp"]
        mem = worker_memory(round(s["params_per_gpu"]), hw, dp, s["in_flight"] * s["saved_bytes"] / tp)
        for key in ("activations_GB", "peak_GB", "fits"):  # MeCeFO's naive pair is a pure-DP comparison
            mem[key] = {"normal": mem[key]["normal"]}
        if shadow_next_stage:
            nxt = worker_memory(round(stages[(i + 1) % len(stages)]["params_per_gpu"]), hw, dp, 0.0)
            mem["shadow_GB"] = nxt["static_GB"] - nxt["grads_GB"]
            mem["static_GB"] += mem["shadow_GB"]
            mem["peak_GB"]["normal"] += mem["shadow_GB"]
            mem["fits"]["normal"] = mem["peak_GB"]["normal"] <= hw.memory_GB
        per_stage.append(mem)
    peak = max(range(len(per_stage)), key=lambda i: per_stage[i]["peak_GB"]["normal"])
    out = dict(per_stage[peak])
    out.update(
        layout=f"tp{step['tp']} x pp{step['pp']} x dp{dp}",
        peak_stage=peak,
        stage_peak_GB=[m["peak_GB"]["normal"] for m in per_stage],
    )
    return out


def parts_from_counts(
    one: Dict[str, Dict[str, Any]],
    two: Dict[str, Dict[str, Any]],
    params_one: int,
    params_two: int,
    embed_params: int,
) -> LayerParts:
    """A layer = the two-layer model less the one-layer model; the rest = one-layer less a layer."""
    layer = {k: two[k]["flops"] - one[k]["flops"] for k in ("mb:normal", "mb:forward")}
    saved = two["mb:normal"]["saved_bytes"] - one["mb:normal"]["saved_bytes"]
    layer_params = params_two - params_one
    return LayerParts(
        layer_flops=layer["mb:normal"],
        layer_forward_flops=layer["mb:forward"],
        layer_saved=saved,
        layer_params=layer_params,
        rest_flops=one["mb:normal"]["flops"] - layer["mb:normal"],
        rest_forward_flops=one["mb:forward"]["flops"] - layer["mb:forward"],
        rest_saved=one["mb:normal"]["saved_bytes"] - saved,
        embed_params=embed_params,
        head_params=params_one - layer_params - embed_params,
    )


def stage_table(step: LayoutStep) -> List[Dict[str, object]]:
    """One row per stage, for summary.json: compute, TP all-reduces and sends are one micro-batch's
    seconds on one GPU; the exposed DP exchange and the optimizer are once a step."""
    keys = ("layers", "params_per_gpu", "compute_s", "tp_comm_s", "p2p_s", "dp_comm_s", "optimizer_s", "in_flight")
    stages: Sequence[Mapping[str, object]] = step["stages"]
    return [{k: s[k] for k in keys} for s in stages]
