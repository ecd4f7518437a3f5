"""The optimizer recipe every method shares: AdamW, linear warm-up, cosine decay (GaLore's LLaMA recipe)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def make_optimizer(model: torch.nn.Module, tcfg) -> torch.optim.Optimizer:
    import torch

    # the fused (single-kernel) AdamW on CUDA; foreach (multi-tensor) elsewhere
    on_cuda = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(
        model.parameters(),
        lr=tcfg.lr,
        betas=tuple(tcfg.betas),
        weight_decay=tcfg.weight_decay,
        **({"fused": True} if on_cuda else {"foreach": True}),
    )


def make_scheduler(optimizer, tcfg):
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(tcfg))


def lr_factor(tcfg):
    """Linear warm-up to lr, then cosine decay to lr * min_lr_ratio at max_steps."""
    warmup, total, floor = tcfg.warmup_steps, tcfg.max_steps, tcfg.min_lr_ratio

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
