"""Seconds from counts: FLOPs over peak x efficiency, bytes over bandwidth (no torch here).

A numerics-free run whose FLOP counts are cached reads only this: the counting itself
(flops.py, on a meta-device model) runs once per shape.
"""

from __future__ import annotations

from typing import Any, Dict

from ..config import AttrDict, plain
from .comm import exposed_comm_s

#: kernels whose seconds come from bytes moved, not FLOPs
BYTE_KERNELS = ("optimizer", "state_copy", "checkpoint_save")
#: bytes an AdamW step streams per parameter: read weight, grad, m, v; write weight, m, v (fp32)
ADAMW_BYTES_PER_PARAM = 28
#: mixed precision also writes the bf16 compute copy of the weights
BF16_COPY_BYTES = 2


def optimizer_s(n_params: int, hw, n_workers: int) -> float:
    per_param = ADAMW_BYTES_PER_PARAM + (BF16_COPY_BYTES if hw.compute_dtype == "bf16" else 0)
    shards = n_workers if hw.shard != "none" else 1  # every sharding level shards the optimizer
    return n_params * per_param / shards / (hw.hbm_GBps * 1e9)


def kernel_seconds(
    counts: Dict[str, Dict[str, Any]], hw, efficiency: float, n_params: int, state_bytes: int, n_workers: int
) -> Dict[str, float]:
    """Seconds of every kernel: compute kernels by FLOPs, byte kernels by bandwidth."""
    peak = hw.peak_tflops * 1e12
    seconds = {}
    for name, c in counts.items():
        eff = {"formula": hw.svd_efficiency, "formula_randomized_svd": hw.rsvd_efficiency}.get(c["counted"], efficiency)
        seconds[name] = c["flops"] / (peak * eff)
    seconds["optimizer"] = optimizer_s(n_params, hw, n_workers)
    # REFT's snapshot: each worker copies its 1/n shard of the state to host memory
    seconds["state_copy"] = state_bytes / n_workers / (hw.host_GBps * 1e9)
    seconds["checkpoint_save"] = state_bytes / (hw.storage_GBps * 1e9)
    return seconds


def calibrate_efficiency(
    hw, row, normal_flops_per_seq: float, forward_flops_per_seq: float, n_params: int, grad_bytes: int
) -> float:
    """The efficiency at which the failure-free step gives the paper's throughput at its shape.

    `row`: tokens_per_s (cluster-wide), global_batch (sequences), seq_len; the cluster is the
    preset's `gpus` workers. Step = compute / (peak e) + optimizer + exposed all-reduce; the
    exposed part shrinks as compute grows, so the step is monotone in e: bisection.
    """
    # the calibration is of the paper's cluster: links the row names (its inter-node bandwidth)
    # override the run's, so a sweep over the bandwidth keeps the efficiency it calibrated
    hw = AttrDict(plain(hw), **{k: v for k, v in row.items() if k in ("inter_node_GBps", "intra_node_GBps")})
    per_worker = row["global_batch"] / hw.gpus
    target = row["global_batch"] * row["seq_len"] / row["tokens_per_s"]
    peak = hw.peak_tflops * 1e12
    opt = optimizer_s(n_params, hw, hw.gpus)

    def step(e: float) -> float:
        compute = per_worker * normal_flops_per_seq / (peak * e)
        backward = compute - per_worker * forward_flops_per_seq / (peak * e)
        return compute + opt + exposed_comm_s(grad_bytes, hw.gpus, hw, backward)

    if step(1.0) > target:
        raise ValueError(
            f"hardware={hw.name}: even at 100% efficiency a step takes {step(1.0):.3f} s, "
            f"the paper's throughput needs {target:.3f} s (check the bandwidths)"
        )
    lo, hi = 1e-4, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step(mid) > target else (lo, mid)
    return hi
