"""Compute from FLOPs: kernels counted by torch on a shape-only model, timed by a hardware preset.

`count_kernels` runs each kernel of kernels.py under `torch.utils.flop_counter.FlopCounterMode`
on a model built on the meta device (no memory, so a 7B shape costs nothing), through the
same code paths as training, and counts the bytes autograd saves for backward (the
activation memory of that kernel). Seconds = FLOPs / (peak x efficiency).

What torch does not count: an SVD (MeCeFO's projection refresh) carries its own FLOP
formula (`formula_flops`), charged at `hardware.svd_efficiency` for a full SVD and at
`hardware.rsvd_efficiency` for the randomized one (`formula_kind`); the optimizer step, state
copies and checkpoint writes move bytes and are charged by bandwidth (BYTE_KERNELS).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict
from unittest import mock

from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from ..numerics.approx import saved_activation_bytes
from .seconds import BYTE_KERNELS


@contextlib.contextmanager
def meta_safe_attention():
    """Attention as training runs it, on any device, the meta device included.

    1. transformers decides whether to build a causal mask by reading tensor values (is the
       batch packed or padded?), which a meta tensor does not have. For training batches
       (unpacked, unpadded, causal, no cache) it always decides: no mask, sdpa's is_causal
       (tests/test_timing.py checks this on the CPU model). We return that decision directly.
    2. On the meta device sdpa falls back to its math path, which saves the s x s attention
       probabilities for backward; the fused kernels that training uses (flash attention on
       GPU and CPU) save only the output and a log-sum-exp. We call the fused CPU kernel, whose
       shapes are known on meta, so the saved bytes are those of flash attention. With fewer
       K/V heads than query heads (grouped-query attention) `_GroupedFlash` does the same and
       keeps K and V at their own width.
    """
    import torch
    import transformers.models.llama.modeling_llama as llama

    sdpa = torch.nn.functional.scaled_dot_product_attention
    fused = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

    def flash(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        grouped = key.shape[1] != query.shape[1]
        if attn_mask is not None or dropout_p or (grouped and query.shape[1] % key.shape[1]):
            return sdpa(
                query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kwargs
            )
        if grouped:  # grouped-query attention (enable_gqa, or K/V with fewer heads than Q)
            return _GroupedFlash.apply(query, key, value, is_causal, scale)
        return fused(query, key, value, 0.0, is_causal, scale=scale)[0]

    with (
        mock.patch.object(llama, "create_causal_mask", lambda **kwargs: None),
        mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", flash),
    ):
        yield


class _GroupedFlash:
    """Flash attention with fewer K/V heads than query heads, as the fused GPU kernels run it:
    they read each K/V head for its group of query heads and save K and V at their own width.
    The CPU kernel has no grouped mode, so K/V are repeated to the query heads for the call
    (the FLOPs are those of the full attention, as for the CUDA kernels) and only the
    unrepeated K/V are saved for backward; the backward sums the repeated heads' gradients."""

    @staticmethod
    def apply(query, key, value, is_causal, scale):
        import torch

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                rep = q.shape[1] // k.shape[1]
                out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                    q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), 0.0, is_causal, scale=scale
                )
                ctx.save_for_backward(q, k, v, out, lse)
                return out

            @staticmethod
            def backward(ctx, grad):
                q, k, v, out, lse = ctx.saved_tensors
                rep = q.shape[1] // k.shape[1]
                dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                    grad,
                    q,
                    k.repeat_interleave(rep, 1),
                    v.repeat_interleave(rep, 1),
                    out,
                    lse,
                    0.0,
                    is_causal,
                    scale=scale,
                )
                b, kv, s, d = k.shape
                return dq, dk.view(b, kv, rep, s, d).sum(2), dv.view(b, kv, rep, s, d).sum(2)

        return Fn.apply(query, key, value)


def _flash_forward_flops(query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _flash_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _flash_flop_formulas():
    """torch's counter knows the CUDA flash kernel, not the CPU one: same formulas (QK^T and AV,
    counted in full, as for the CUDA kernels and the 6N + attention rule)."""
    import torch

    aten = torch.ops.aten
    return {
        aten._scaled_dot_product_flash_attention_for_cpu: _flash_forward_flops,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _flash_backward_flops,
    }


def count_kernels(kernels: Dict[str, Callable[[], None]], model) -> Dict[str, Dict[str, Any]]:
    """FLOPs and saved-for-backward bytes of each compute kernel (byte kernels are skipped)."""
    out = {}
    for name, fn in kernels.items():
        if name in BYTE_KERNELS:
            continue
        formula = getattr(fn, "formula_flops", None)
        if formula is not None:  # "formula": a full SVD; "formula_randomized_svd": the randomized one
            kind = getattr(fn, "formula_kind", "svd")
            out[name] = {
                "flops": float(formula),
                "saved_bytes": 0,
                "counted": "formula" if kind == "svd" else f"formula_{kind}",
            }
            continue
        saved: Dict[str, int] = {}
        with (
            meta_safe_attention(),
            FlopCounterMode(display=False, custom_mapping=_flash_flop_formulas()) as counter,
            saved_activation_bytes(model, saved),
        ):
            fn()
        out[name] = {
            "flops": float(counter.get_total_flops()),
            "saved_bytes": saved.get("bytes", 0),
            "counted": "torch",
        }
    model.zero_grad(set_to_none=True)
    return out
