"""Memory per worker: weights, gradients, optimizer state (by dtype and sharding), activations.

Activation bytes are what autograd saves for backward in each kernel, counted on the timed
shape (flops.count_kernels). The peak of a worker is its static state plus the activations
of the kernel it runs. Three kernels are compared, as the paper's ablation does:

- normal: one micro-batch;
- neighbour: MeCeFO's two micro-batches under the switched-on approximations;
- naive: neighbour-do-both without approximations (two normal micro-batches).

Not modelled: allocator fragmentation, temporary buffers, FSDP's gathered layer weights.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

GB = 1e9


def worker_memory(
    n_params: int, hw, n_workers: int, normal_bytes: float, neighbour_bytes: Optional[float] = None
) -> Dict[str, Any]:
    mixed = hw.compute_dtype == "bf16"
    shards = n_workers
    weights = n_params * (2 if mixed else 4) / (shards if hw.shard == "full" else 1)
    master = n_params * 4 / (shards if hw.shard != "none" else 1) if mixed else 0.0  # fp32 master copy
    adam = n_params * 8 / (shards if hw.shard != "none" else 1)
    grads = n_params * (2 if hw.grad_dtype == "bf16" else 4) / (shards if hw.shard in ("gradients", "full") else 1)
    static = weights + master + adam + grads
    activations = {"normal": normal_bytes, "naive": 2 * normal_bytes}
    if neighbour_bytes is not None:
        activations["neighbour"] = neighbour_bytes
    peak = {k: static + v for k, v in activations.items()}
    return {
        "capacity_GB": hw.memory_GB,
        "shard": hw.shard,
        "weights_GB": weights / GB,
        "master_GB": master / GB,
        "optimizer_GB": adam / GB,
        "grads_GB": grads / GB,
        "static_GB": static / GB,
        "activations_GB": {k: v / GB for k, v in activations.items()},
        "peak_GB": {k: v / GB for k, v in peak.items()},
        "fits": {k: v / GB <= hw.memory_GB for k, v in peak.items()},
    }
