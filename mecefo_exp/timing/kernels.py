"""The kernels the clock charges, built once for every compute model.

A kernel is a callable that does one unit of a worker's work on a copy of the model: one
micro-batch forward+backward per mode (`mb:normal`, `mb:forward`, a method's modes), the
optimizer step, a copy of the training state, a checkpoint write, and a method's extras
(MeCeFO's neighbour pair and SVD refresh). The same callables are timed on this machine
(profile.py) or run under torch's FLOP counter on a shape-only (meta) model (flops.py), so
both compute models go through the code paths training uses: the `approximations`
context, FFN recomputation, the low-rank function.
"""

from __future__ import annotations

import copy
import io
from typing import Callable, Dict

import torch

from ..numerics.executor import LocalCluster
from ..numerics.optim import make_optimizer
from ..plan import FORWARD, Mode, Sample
from .profile import Kernel


class KernelBench(LocalCluster):
    """A model copy with the run's modes. On the meta device it reads token ids of the right
    shape (zeros: FLOPs and saved bytes do not depend on the values)."""

    def __init__(
        self,
        model: torch.nn.Module,
        modes: Dict[str, Mode],
        device: torch.device,
        micro_batch: int,
        seq_len: int,
        stream=None,
        grad_accum: int = 1,
        precision: str = "fp32",
    ):
        # what a worker really does per step: its micro-batch in grad_accum chunks, at the run's precision
        super().__init__(model, stream, modes, device, grad_accum=grad_accum, precision=precision)
        self.micro_batch, self.seq_len = micro_batch, seq_len

    def load(self, samples):
        if self.stream is not None:
            return super().load(samples)
        return torch.zeros(len(samples), self.micro_batch, self.seq_len + 1, dtype=torch.long, device=self.device)


def micro_batch_kernel(bench: KernelBench, mode: Mode) -> Callable[[], None]:
    """One micro-batch forward (+ backward unless forward-only) in `mode`."""

    def fn():
        bench.model.zero_grad(set_to_none=True)
        bench.run_mode([Sample(0, 0)], mode)

    return fn


def build_kernels(bench: KernelBench, method, trainer_cfg) -> Dict[str, Callable[[], None]]:
    """The kernels by name. A kernel may carry `prepare`: work that must precede it but is not part
    of it, which a timing runs before its clock starts (profile.time_kernels)."""
    model = bench.model
    optimizer = make_optimizer(model, trainer_cfg)
    sample = [Sample(0, 0)]
    grads: Dict[torch.nn.Parameter, torch.Tensor] = {}

    def give_gradients():
        """A normal micro-batch's gradients, computed once and handed back to the parameters before
        every optimizer step (a pointer each: the micro-batch kernels timed beside it set them to
        None), so that the optimizer kernel times clipping and AdamW alone."""
        if not grads:
            model.zero_grad(set_to_none=True)
            bench.run_mode(sample, bench.modes["normal"])
            grads.update({p: p.grad for p in model.parameters() if p.grad is not None})
        for p, g in grads.items():
            p.grad = g

    def optimizer_step():
        if next(model.parameters()).grad is None:  # called without its preparation
            give_gradients()
        torch.nn.utils.clip_grad_norm_(model.parameters(), trainer_cfg.grad_clip or float("inf"))
        optimizer.step()

    def state_copy():
        {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        copy.deepcopy(optimizer.state_dict())

    def checkpoint_save():
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, io.BytesIO())

    kernels = {mode.kernel: micro_batch_kernel(bench, mode) for mode in list(bench.modes.values()) + [FORWARD]}
    kernels.update(
        optimizer=Kernel(optimizer_step, prepare=give_gradients), state_copy=state_copy, checkpoint_save=checkpoint_save
    )
    kernels.update({name: build(bench) for name, build in method.extra_kernels().items()})
    return kernels
