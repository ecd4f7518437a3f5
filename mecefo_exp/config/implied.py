"""What a config implies: the layout's replicas, the global batch in sequences, the stage split."""

from __future__ import annotations

from typing import Any, List


def is_hybrid(cfg: Any) -> bool:
    """Whether the run's layout is more than pure data parallelism (parallel.tp or parallel.pp > 1)."""
    p = cfg.get("parallel")
    return p is not None and (p.tp > 1 or p.pp > 1)


def data_parallel_size(cfg: Any) -> int:
    """Replicas of the layout: parallel.dp, or the workers over tp x pp (pure DP: every worker)."""
    p = cfg.get("parallel")
    if p is None:
        return cfg.cluster.n_workers
    return p.dp if p.dp is not None else cfg.cluster.n_workers // (p.tp * p.pp)


def sequences_per_step(cfg: Any) -> int:
    """The global batch in sequences: every worker's micro-batch (pure DP), or every replica's
    micro-batches (the hybrid layout)."""
    if not is_hybrid(cfg):
        return cfg.cluster.n_workers * cfg.data.micro_batch
    return data_parallel_size(cfg) * cfg.parallel.microbatches * cfg.data.micro_batch


def stage_layers(n_layers: int, pp: int, split: str = "even") -> List[int]:
    """Transformer layers of each pipeline stage. even: n_layers / pp each; llama3: the first and
    the last stage one fewer than the others, (n_layers + 2) / pp (they also hold the embedding
    and the output head). The caller has checked that the division is exact."""
    if pp == 1:
        return [n_layers]
    if split == "even":
        return [n_layers // pp] * pp
    per = (n_layers + 2) // pp
    return [per - 1] + [per] * (pp - 2) + [per - 1]
