"""MeCeFO's three approximations, as switches on transformers' LLaMA decoder layers.

`approximations(model, ...)` is a context manager: inside it, every decoder layer runs
with the techniques that are switched on; outside it the model is untouched (the
patches are instance attributes that are removed on exit, so parameter names, state
dicts and the failure-free path never change).

1. Skip-connection over attention in backward (`skip_attention`). The attention block's
   forward is computed exactly (the loss is exact) but under no_grad: no activations
   are stored and in backward the gradient flows only through the residual. The
   pre-attention RMSNorm, whose output feeds only attention, runs under no_grad too
   (our reading: it gets no gradient from the neighbour, docs/METHODS.md marks it UNKNOWN).
2. FFN recomputation (`recompute_ffn`). Only the FFN input is kept; the FFN's
   intermediates are recomputed in backward (torch.utils.checkpoint, non-reentrant).
   Numerically identical.
3. Low-rank FFN weight gradients (`lowrank_ffn`). For y = x Wᵀ (nn.Linear stores W as
   out x in): grad_W ≈ (G_yᵀ (x V)) Vᵀ with V the top-r right singular vectors of W
   itself (in x r), refreshed by `LowRankProjections.refresh`. The forward saves x V
   (r columns) instead of x. The input gradient G_y W stays exact.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterable, List, Optional

import torch
from torch.utils.checkpoint import checkpoint

from .projections import (
    FFN_LINEARS,  # noqa: F401
    LowRankProjections,  # noqa: F401
    decoder_layers,  # noqa: F401
    is_attention_parameter,  # noqa: F401
    svd_flops,  # noqa: F401
    top_right_singular_vectors,  # noqa: F401
)


# ------------------------------------------------------------ low-rank weight gradient
class LowRankWeightGradLinear(torch.autograd.Function):
    """y = x Wᵀ with an exact input gradient and a rank-r weight gradient (G_yᵀ x V) Vᵀ.

    `project_early`: save x V (r columns, the memory saving) in forward. Under FFN
    recomputation the forward runs twice and what it saves lives only for one layer's
    backward, so then x is saved and projected once, in backward.
    """

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, weight: torch.Tensor, v: torch.Tensor, project_early: bool = True
    ) -> torch.Tensor:
        keep = None
        if weight.requires_grad:
            keep = x @ v if project_early else x
        ctx.project_early = project_early
        ctx.save_for_backward(keep, weight, v)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        # Under autocast (trainer.precision=bf16) the forward ran in bf16 while the weight and V
        # are fp32 and backward runs outside autocast: compute in grad_y's dtype, return the
        # weight gradient in the weight's (fp32 master) dtype. In fp32 every .to() is a no-op.
        kept, weight, v = ctx.saved_tensors
        dtype = grad_y.dtype
        v_ = v.to(dtype)
        xv = kept if ctx.project_early or kept is None else kept.to(dtype) @ v_
        grad_x = grad_y @ weight.to(dtype) if ctx.needs_input_grad[0] else None
        grad_w = None
        if ctx.needs_input_grad[1]:
            gy = grad_y.reshape(-1, grad_y.shape[-1])
            grad_w = ((gy.t() @ xv.reshape(-1, xv.shape[-1]).to(dtype)) @ v_.t()).to(weight.dtype)
        return grad_x, grad_w, None, None


# ------------------------------------------------------------------ the context
@contextlib.contextmanager
def approximations(
    model: torch.nn.Module,
    skip_attention: bool = True,
    recompute_ffn: bool = True,
    projections: Optional[LowRankProjections] = None,
    layers: Optional[Iterable[int]] = None,
):
    """Run `model` with the switched-on approximations (see the module docstring), on every
    decoder layer or only on `layers` (indices: one pipeline stage's, where a neighbour in a
    hybrid layout covers a failed slot of that stage only)."""
    patched: List[torch.nn.Module] = []

    def patch(module: torch.nn.Module, forward) -> None:
        module.forward = forward  # an instance attribute shadows the class's forward
        patched.append(module)

    try:
        chosen = None if layers is None else set(layers)
        for i, layer in enumerate(decoder_layers(model)):
            if chosen is not None and i not in chosen:
                continue
            if skip_attention:
                patch(layer.input_layernorm, _no_grad(layer.input_layernorm.forward))
                patch(layer.self_attn, _no_grad(layer.self_attn.forward))
            if projections is not None:
                for name in projections.modules:
                    lin = getattr(layer.mlp, name)
                    patch(lin, _lowrank_forward(lin, projections.v[id(lin)], project_early=not recompute_ffn))
            if recompute_ffn:
                patch(layer.mlp, _recomputed(layer.mlp.forward))
        yield
    finally:
        for module in patched:
            del module.forward


def _no_grad(forward):
    def run(*args, **kwargs):
        with torch.no_grad():
            return forward(*args, **kwargs)

    return run


def _recomputed(forward):
    def run(x):
        if not torch.is_grad_enabled():
            return forward(x)
        return checkpoint(forward, x, use_reentrant=False)

    return run


def _lowrank_forward(linear: torch.nn.Linear, v: torch.Tensor, project_early: bool):
    if linear.bias is not None:
        raise ValueError("low-rank FFN gradients assume bias-free linears (LLaMA's are)")

    def run(x):
        return LowRankWeightGradLinear.apply(x, linear.weight, v, project_early)

    return run


# -------------------------------------------------------- activation accounting
@contextlib.contextmanager
def saved_activation_bytes(model: torch.nn.Module, out: Dict[str, int]):
    """Count the bytes autograd keeps for backward (unique storages, parameters excluded).

    A CPU stand-in for torch.cuda.max_memory_allocated: the activations are what the
    three techniques save, and what a neighbour doing two micro-batches must hold.
    """
    # storages are told apart by their identity, not their address: meta tensors (the
    # paper-scale clock counts a 7B model's activations without memory) all have address 0
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen = set()
    out.setdefault("bytes", 0)

    def pack(t: torch.Tensor):
        try:
            ptr = t.untyped_storage()._cdata
            nbytes = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):
            return t
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            out["bytes"] += nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield
