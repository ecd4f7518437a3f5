"""MeCeFO's low-rank projections: which parameters its approximations touch, and the V of every
FFN linear with its refresh schedule. The schedule is what a numerics-free run keeps (it decides
which steps pay for an SVD), so this module imports torch only to compute a decomposition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Optional

if TYPE_CHECKING:
    import torch

FFN_LINEARS = ("gate_proj", "up_proj", "down_proj")


def decoder_layers(model: torch.nn.Module) -> List[torch.nn.Module]:
    return list(model.model.layers)


def is_attention_parameter(name: str) -> bool:
    """Parameters that the skip-connection cuts off: attention weights and the norm before it."""
    return ".self_attn." in name or ".input_layernorm." in name


def top_right_singular_vectors(weight: torch.Tensor, rank: int) -> torch.Tensor:
    """V (in x r): the top-r right singular vectors of W (out x in).

    With r >= in, V is a complete orthonormal basis (V Vᵀ = I) and the gradient is exact.
    """
    import torch

    w = weight.detach().float()
    full = rank > min(w.shape)
    _, _, vh = torch.linalg.svd(w, full_matrices=full)
    return vh[: min(rank, vh.shape[0])].t().contiguous().to(weight.dtype)


class LowRankProjections:
    """The V of every FFN linear, refreshed from the current weights every `every` steps."""

    def __init__(self, model: torch.nn.Module, rank: int, every: int, modules: Iterable[str] = FFN_LINEARS):
        self.model, self.rank, self.every = model, rank, every
        self.modules = tuple(modules)
        self.v: Dict[int, torch.Tensor] = {}  # id(linear) -> V
        self.refreshed_at: Optional[int] = None

    def linears(self) -> Iterator[torch.nn.Linear]:
        for layer in decoder_layers(self.model):
            for name in self.modules:
                yield getattr(layer.mlp, name)

    def state_dict(self) -> Dict[str, object]:
        """V of each linear in model order (ids do not survive a process) and the refresh step."""
        return {"v": [self.v[id(lin)] for lin in self.linears()] if self.v else None,
                "refreshed_at": self.refreshed_at}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        v = state["v"]
        self.v = {} if v is None else {id(lin): t for lin, t in zip(self.linears(), v)}
        self.refreshed_at = state["refreshed_at"]

    def due(self, step: int) -> bool:
        last = self.refreshed_at
        return last is None or step - last >= self.every or step < last  # step < last: rolled back

    def refresh(self, step: int, compute: bool = True) -> None:
        """New V from the current weights; `compute=False` only records the step (a numerics-free
        run: no weights to decompose, and an SVD of a 7B's FFN takes ~12 ms)."""
        if compute:
            self.v = {id(lin): top_right_singular_vectors(lin.weight, self.rank) for lin in self.linears()}
        self.refreshed_at = step


def svd_flops(projections: LowRankProjections) -> float:
    """FLOPs of one refresh: a thin SVD of each FFN weight (m x n, m >= n) computing Sigma and V,
    about 4 m n^2 + 8 n^3 (Golub & Van Loan, Matrix Computations, 4th ed., Fig. 8.6.1, R-SVD)."""
    total = 0.0
    for lin in projections.linears():
        m, n = max(lin.weight.shape), min(lin.weight.shape)
        total += 4 * m * n * n + 8 * n ** 3
    return total
