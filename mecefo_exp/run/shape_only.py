"""The training state of a numerics-free run (`trainer.numerics=false`).

The model has only a shape: its parameter count and the clock's FLOP counts come from timing/
(counted once per shape on the meta device, then cached), a step computes nothing (the method
still sees the plan), nothing is evaluated and nothing needs saving. This module and what a
numerics-free run imports around it load no tensor library, so such a run starts in about a
second. `TrainingState` (training.py) is the variant that trains; the loop treats both alike.
"""

from __future__ import annotations

from typing import Dict, Optional

from ..config import is_hybrid, plain, sequences_per_step
from ..numerics.optim import lr_factor
from ..timing.counts import parameter_count


class ShapeOnlyState:
    """trainer.numerics=false: the model's shape only, no tensor math."""

    numerics = False
    stream = None  # no sample stream: nothing is computed
    achieved_tflops_s = None

    model = None  # no weights: the clock's FLOP counts come from timing/, counted once per shape
    device = None
    peak_tflops = None

    def __init__(self, cfg, n_workers: int):
        self.tcfg = plain(cfg.trainer)
        self.corpus = None
        if cfg.model.vocab_size is None:  # the tokenizer sizes the model
            from ..data import load_corpus

            self.corpus = load_corpus(cfg.data)
        self.vocab_size = self.corpus.vocab_size if self.corpus is not None else cfg.model.vocab_size
        self.n_params = parameter_count(cfg.model, self.vocab_size)
        # pure DP: every worker's micro-batch; a hybrid layout: dp x parallel.microbatches micro-batches
        sequences = sequences_per_step(cfg) if is_hybrid(cfg) else n_workers * cfg.data.micro_batch
        self.tokens_per_step = sequences * cfg.data.seq_len
        self.lr = float(cfg.trainer.lr)
        self._lr_factor = lr_factor(self.tcfg)
        self.cluster = None
        self.kernel_counts: Dict = {}

    def attach(self, cluster, modes) -> None:
        """No executor: a numerics-free step runs nothing."""

    def describe_data(self, max_steps: int) -> str:
        return "numerics off (no tensor math)"

    def compute(self, plan, method, step: int) -> Dict:
        """The method still sees the step (its counters), nothing is computed."""
        method.before_optimizer(plan, None)
        return {"tokens": self.tokens_per_step, "lr": self.lr * self._lr_factor(step)}

    def book_steps(self, first: int, count: int) -> Dict:
        """`count` steps from `first` on at once (an event-driven run): their tokens, the last one's lr."""
        return {"tokens": count * self.tokens_per_step, "lr": self.lr * self._lr_factor(first + count - 1)}

    def evaluate(self) -> Optional[float]:
        return None

    def state_dict(self) -> Dict:
        return {}  # only the step, which the trainer adds (and no resume: such a run takes seconds)

    def load_state_dict(self, state: Dict) -> None:
        pass

    def summary(self) -> Dict:
        out: Dict[str, object] = {"achieved_tflops_s": None, "mfu": None, "n_params": self.n_params}
        if self.corpus is not None:
            out["data_fingerprint"] = self.corpus.fingerprint
        return out
