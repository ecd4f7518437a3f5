"""The gradient exchange of a data-parallel step, as a cluster does it.

Hierarchical all-reduce (what NCCL does across machines): a reduce-scatter over NVLink
inside each machine, an all-reduce of each GPU's 1/g shard between machines (the g GPUs of
a machine share its network link, so the machine moves the whole gradient), an all-gather
over NVLink. For S bytes over n workers, g per machine, k = ceil(n / g) machines:

    t = 2 (g-1)/g * S / B_intra + 2 (g-1) * a_intra        (inside a machine, when g > 1)
      + 2 (k-1)/k * S / B_inter + 2 (k-1) * a_inter        (between machines, when k > 1)

With one worker per machine (g = 1) this is the plain ring all-reduce. Sharding moves the
same bytes as reduce-scatter + all-gather, except full sharding (FSDP / ZeRO-3), which also
all-gathers the weights again for backward: 1.5x the all-reduce.

Overlap (DDP buckets): the all-reduce of a bucket starts as soon as backward has produced
it, so only what does not fit behind the slowest worker's backward is exposed, and never
less than the last bucket's exchange.
"""

from __future__ import annotations

import math

FULL_SHARD_FACTOR = 1.5  # all-gather (forward) + all-gather (backward) + reduce-scatter, in all-reduce halves


def allreduce_s(nbytes: float, n_workers: int, hw) -> float:
    if n_workers <= 1 or nbytes <= 0:
        return 0.0
    g = min(hw.gpus_per_node, n_workers)
    k = math.ceil(n_workers / g)
    t = 0.0
    if g > 1:
        t += 2 * (g - 1) / g * nbytes / (hw.intra_node_GBps * 1e9) + 2 * (g - 1) * hw.intra_latency_s
    if k > 1:
        t += 2 * (k - 1) / k * nbytes / (hw.inter_node_GBps * 1e9) + 2 * (k - 1) * hw.inter_latency_s
    return t * (FULL_SHARD_FACTOR if hw.shard == "full" else 1.0)


def exposed_comm_s(nbytes: float, n_workers: int, hw, backward_s: float) -> float:
    """Seconds of the exchange that the step waits for after the slowest backward ends."""
    total = allreduce_s(nbytes, n_workers, hw)
    if not hw.overlap or total == 0.0:
        return total
    last_bucket = allreduce_s(min(nbytes, hw.bucket_MB * 1e6), n_workers, hw)
    return max(last_bucket, total - backward_s)
