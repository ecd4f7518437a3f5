"""The training state: what a step changes and a checkpoint holds.

`TrainingState` owns the corpus and sample stream, the model, AdamW and its schedule, the torch
RNG, and the accounting of the FLOPs this process ran (achieved TFLOP/s and MFU). It computes a
step (the cluster's forward/backward, the method's look at the gradients, clipping, the
optimizer) and evaluates.

Its numerics-free variant is `ShapeOnlyState` (shape_only.py), which imports no tensor library.
The loop treats both the same way.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Dict, Optional

import torch

from ..config import plain
from ..data import SampleStream, load_corpus, validation_blocks
from ..errors import ConfigError
from ..numerics.executor import LocalCluster, microbatch_losses
from ..numerics.model import build_model, count_parameters
from ..numerics.optim import make_optimizer, make_scheduler
from ..plan import NonFiniteLoss, StepNotCommitted

log = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("cluster.device=cuda but no CUDA device is visible; allowed here: cpu, auto")
    return torch.device(name)


def prepare_device(cfg) -> torch.device:
    """The run's device, with TF32 switched on where the precision asks for it."""
    device = pick_device(cfg.cluster.device)
    if cfg.trainer.precision == "tf32":
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        else:
            log.warning("trainer.precision=tf32 acts on CUDA matmuls only: this %s run computes in fp32", device.type)
    return device


@torch.no_grad()
def evaluate(model: torch.nn.Module, blocks: torch.Tensor, device: torch.device, batch: int = 16) -> float:
    """Mean next-token loss over the validation blocks (all blocks have the same length)."""
    model.eval()
    total, n = 0.0, 0
    for start in range(0, blocks.shape[0], batch):
        chunk = blocks[start : start + batch].to(device)
        losses = microbatch_losses(model, chunk.unsqueeze(1))
        total += losses.sum().item()
        n += losses.numel()
    model.train()
    return total / n


class TrainingState:
    """Corpus, model, optimizer, scheduler, RNG; a step and an evaluation."""

    numerics = True
    cluster: LocalCluster  # the tier's executor, attached once the method's modes are known (attach)

    def __init__(self, cfg, n_workers: int, device: torch.device, peak_tflops: Optional[float]):
        self.tcfg = plain(cfg.trainer)
        self.device = device
        # dense peak of this machine's device at the run's precision (None on a CPU): MFU's denominator
        self.peak_tflops = peak_tflops
        self.corpus = load_corpus(cfg.data)
        self.vocab_size = self.corpus.vocab_size
        self.stream = SampleStream(self.corpus.train, cfg.data.seq_len, cfg.data.micro_batch, n_workers, cfg.seed)
        self.val_blocks = validation_blocks(self.corpus.val, cfg.data.seq_len, cfg.data.eval_blocks)
        self.model = build_model(cfg.model, self.vocab_size, cfg.seed).to(device)
        self.optimizer = make_optimizer(self.model, cfg.trainer)
        self.scheduler = make_scheduler(self.optimizer, cfg.trainer)
        self.n_params = count_parameters(self.model)
        self.modes: Dict = {}
        self.kernel_counts: Dict = {}  # FLOPs per kernel (timing/flops.py), attached with the clock
        self.flops_done, self.compute_s = 0.0, 0.0  # this segment's computed steps, wall clock

    def attach(self, cluster, modes) -> None:
        self.cluster, self.modes = cluster, modes

    def describe_data(self, max_steps: int) -> str:
        return f"corpus {self.corpus.train.size} train tokens ({self.stream.epochs_at(max_steps - 1):.1f} epochs)"

    # ---- a step
    def compute(self, plan, method, step: int) -> Dict:
        """Forward/backward of the plan, the method's look at the gradients, clipping, AdamW;
        with the FLOP/s this process reached on it (wall clock) and its MFU where the device's
        peak is known (timing/peaks.py)."""
        started = time.perf_counter()
        result = self.cluster.execute(plan)
        if not self.cluster.commit():
            raise StepNotCommitted("torchft's should_commit said no (a collective of this step failed)")
        method.before_optimizer(plan, result)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tcfg.grad_clip or float("inf"))
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        loss = float(result.loss)  # the step's first wait for the device: the seconds below include its work
        seconds = time.perf_counter() - started
        flops = self.executed_flops(plan)
        self.flops_done += flops
        self.compute_s += seconds
        tflops = flops / max(seconds, 1e-12) / 1e12
        if not math.isfinite(loss):
            raise NonFiniteLoss(f"step {step}: the training loss is {loss} (diverged); the run stops here")
        return {
            "tokens": result.tokens,
            "loss": loss,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "tflops_s": tflops,
            "mfu": tflops / self.peak_tflops if self.peak_tflops else None,
        }

    def executed_flops(self, plan) -> float:
        """FLOPs of the micro-batches this process ran for `plan` (its share under torchrun),
        from the counted kernels (timing/flops.py: torch's FlopCounterMode on the model)."""
        counts = self.kernel_counts
        return sum(
            len(samples) * counts.get(self.modes[mode].kernel, {}).get("flops", 0.0)
            for mode, samples in self.cluster.my_share(plan).items()
        )

    def evaluate(self) -> Optional[float]:
        return evaluate(self.model, self.val_blocks, self.device)

    @property
    def achieved_tflops_s(self) -> Optional[float]:
        return self.flops_done / self.compute_s / 1e12 if self.compute_s > 0 else None

    # ---- what a checkpoint holds (the step and the harness's books are added by the trainer)
    def state_dict(self) -> Dict:
        """References to the live state; torch.save copies it, in-memory snapshots must clone."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: Dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])

    def summary(self) -> Dict:
        tflops = self.achieved_tflops_s
        return {
            "achieved_tflops_s": tflops,
            "mfu": tflops / self.peak_tflops if tflops and self.peak_tflops else None,
            "data_fingerprint": self.corpus.fingerprint,
            "n_params": self.n_params,
        }
