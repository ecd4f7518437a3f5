"""The executor of a step's plan in one process: n simulated data-parallel workers (every tier's numerics run through it).

Gradients are aggregated per parameter: the sum of the contributions of every
micro-batch whose mode reaches that parameter, divided by how many did. With every
micro-batch in the normal mode this is plain data-parallel averaging.

Micro-batches that run in the same mode go through one forward/backward together: the
sum of per-micro-batch mean losses of a concatenation has exactly the gradient
sum_i g_i of the separate micro-batches, so n workers cost one big batch on two cores.

Gradient accumulation (`grad_accum` = a): each micro-batch of b sequences goes through in a
chunks of b/a sequences, each chunk's mean loss weighted 1/a, so the gradient is the same
sum (up to float rounding) with a chunk's activations alive at a time. Precision: `bf16`
runs forward and backward under torch.autocast (weights, gradients and the loss stay fp32).
`compile`: a torch.compile'd view of the model (the same parameters) runs the modes without
a context; a mode whose context patches module forwards at run time (MeCeFO's neighbour)
would invalidate the compiled graph at every switch, so it runs the eager model.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Union

import torch
import torch.nn.functional as F

from ..plan import Mode, Plan, Sample

#: a micro-batch's mean loss: a 0-d float64 tensor on the device until read with float(), which
#: waits for the device; the trainer reads it after the optimizer step, as a plain loop reads
#: loss.item(), so the host queues the clipping and AdamW while the device finishes the backward
Loss = Union[float, torch.Tensor]


@dataclass
class StepResult:
    loss: Loss  # mean of the per-micro-batch losses (the forward is always exact)
    losses: Dict[Sample, Loss]
    contributors: Dict[str, int]  # parameter name -> micro-batches averaged into its gradient
    tokens: int  # tokens processed (forward) this step


def microbatch_losses(model: Callable[..., Any], batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of each [b, seq_len + 1] micro-batch stacked in `batch`.

    `batch` is [k, b, seq_len + 1]; returns a tensor of k losses.
    """
    k, b, t1 = batch.shape
    flat = batch.view(k * b, t1)
    logits = model(input_ids=flat[:, :-1]).logits
    token_loss = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), flat[:, 1:].reshape(-1), reduction="none"
    )
    return token_loss.view(k, -1).mean(dim=1)


class LocalCluster:
    def __init__(
        self,
        model: torch.nn.Module,
        stream,
        modes: Dict[str, Mode],
        device: torch.device,
        chunk_microbatches: int = 0,
        grad_accum: int = 1,
        precision: str = "fp32",
        compile: bool = False,
    ):
        self.model = model
        self.stream = stream
        self.modes = modes
        self.device = device
        self.chunk = chunk_microbatches
        self.grad_accum = grad_accum
        self.precision = precision
        self.params = dict(model.named_parameters())
        self.compiled = torch.compile(model) if compile and device.type != "meta" else None

    def autocast(self):
        """bf16 autocast where asked (not on the meta device: FLOPs do not depend on it)."""
        if self.precision != "bf16" or self.device.type == "meta":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def load(self, samples: Sequence[Sample]) -> torch.Tensor:
        return torch.stack([self.stream.micro_batch(s.step, s.owner) for s in samples]).to(self.device)

    def run_mode(self, samples: Sequence[Sample], mode: Mode) -> List[Loss]:
        """Forward (and backward unless forward-only) of `samples` in `mode`; grads accumulate."""
        losses: List[Loss] = []
        size = self.chunk or len(samples)
        # `contributes` is the single source of truth for which weights a mode reaches:
        # the others are frozen while it runs, so no stray gradient can enter their sums.
        frozen = [p for name, p in self.params.items() if p.requires_grad and not mode.contributes(name)]
        for p in frozen:
            p.requires_grad_(False)
        try:
            for start in range(0, len(samples), size):
                batch = self.load(samples[start : start + size])
                per_mb: Union[float, torch.Tensor] = 0.0
                # grad_accum chunks along the sequences of every micro-batch; the micro-batch's
                # loss is the mean of its chunks' mean losses (equal chunks: its mean loss)
                for part in batch.chunk(self.grad_accum, dim=1):
                    part = part.contiguous()  # a slice across the sequences (a no-op when whole)
                    runner = self.compiled if self.compiled is not None and mode.context is None else self.model
                    with mode.activate(self.model), self.autocast():
                        if mode.backward:
                            part_losses = microbatch_losses(runner, part) / self.grad_accum
                            part_losses.sum().backward()
                        else:
                            with torch.no_grad():
                                part_losses = microbatch_losses(runner, part) / self.grad_accum
                    per_mb = per_mb + part_losses.detach()
                assert isinstance(per_mb, torch.Tensor)  # grad_accum >= 1 chunk
                if per_mb.device.type == "meta":  # the FLOP counter's shape-only model has no values
                    losses.extend([float("nan")] * per_mb.shape[0])
                else:  # float64: their sums and mean are a float sum's, bit for bit, read or not
                    losses.extend(per_mb.double().unbind(0))
        finally:
            for p in frozen:
                p.requires_grad_(True)
        return losses

    def execute(self, plan: Plan) -> StepResult:
        if not self.model.training:  # train() walks every module: on a GPU that is host time a step waits for
            self.model.train()
        self.model.zero_grad(set_to_none=True)
        losses: Dict[Sample, Loss] = {}
        tokens = 0
        for mode_name, samples in self.my_share(plan).items():
            mode = self.modes[mode_name]
            for sample, loss in zip(samples, self.run_mode(samples, mode)):
                if mode.backward:  # a redundant forward's loss duplicates the real one
                    losses[sample] = loss
            tokens += len(samples) * self.stream.batch_size * (self.stream.blocks.shape[1] - 1)
        counts = contributor_counts(plan, self.modes, self.params)
        loss_sum, n_losses, tokens = self.reduce(losses, tokens)
        average_gradients(self.params, counts)
        return StepResult(loss_sum / n_losses if n_losses else float("nan"), losses, counts, tokens)

    # The hooks the torchrun and torchft tiers override: which micro-batches this process
    # runs, how the partial sums of gradients and losses are combined, and whether the
    # step may be applied (torchft: every live worker's vote).
    def my_share(self, plan: Plan) -> Dict[str, List[Sample]]:
        return plan.by_mode()

    def reduce(self, losses: Dict[Sample, Loss], tokens: int):
        return sum(losses.values()), len(losses), tokens

    def commit(self) -> bool:
        return True


def contributor_counts(plan: Plan, modes: Dict[str, Mode], params: Dict[str, torch.nn.Parameter]) -> Dict[str, int]:
    """How many micro-batches of the whole step reach each parameter (known from the plan alone)."""
    counts = {name: 0 for name in params}
    for mode_name, samples in plan.by_mode().items():
        mode = modes[mode_name]
        if mode.backward:
            for name in counts:
                if mode.contributes(name):
                    counts[name] += len(samples)
    return counts


def average_gradients(params: Dict[str, torch.nn.Parameter], counts: Dict[str, int]) -> None:
    """Divide each summed gradient by its contributor count; no contributor -> no gradient.

    A parameter without a gradient is skipped by AdamW this step (no update, no decay),
    which is what "averaged over nobody" should mean. One division per count over all the
    gradients it divides (a multi-tensor kernel on a GPU, not one launch per parameter); a
    count of 1 divides nothing.
    """
    by_count: Dict[int, List[torch.Tensor]] = {}
    for name, p in params.items():
        c = counts[name]
        if c == 0 or p.grad is None:
            p.grad = None
        elif c > 1:
            by_count.setdefault(c, []).append(p.grad)
    for c, grads in by_count.items():
        torch._foreach_div_(grads, c)
