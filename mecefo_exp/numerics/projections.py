"""MeCeFO's low-rank projections: which parameters its approximations touch, and the V of every
FFN linear with its refresh schedule. The schedule is what a numerics-free run keeps (it decides
which steps pay for an SVD), so this module imports torch only to compute a decomposition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Optional, cast

if TYPE_CHECKING:
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaForCausalLM

FFN_LINEARS = ("gate_proj", "up_proj", "down_proj")


def decoder_layers(model: torch.nn.Module) -> List[LlamaDecoderLayer]:
    """The decoder layers of the LLaMA model.py builds."""
    return cast(List["LlamaDecoderLayer"], list(cast("LlamaForCausalLM", model).model.layers))


def is_attention_parameter(name: str) -> bool:
    """Parameters that the skip-connection cuts off: attention weights and the norm before it."""
    return ".self_attn." in name or ".input_layernorm." in name


#: how the top-r right singular vectors are computed: a full SVD (cuSOLVER / LAPACK), or a
#: randomized range finder with power iterations (Halko, Martinsson & Tropp 2011, Alg. 4.4 + 5.1)
SVD_KINDS = ("full", "randomized")


def top_right_singular_vectors(
    weight: torch.Tensor, rank: int, kind: str = "full", oversample: int = 8, power_iters: int = 2, seed: int = 0
) -> torch.Tensor:
    """V (in x r): the top-r right singular vectors of W (out x in).

    With r >= in, V is a complete orthonormal basis (V Vᵀ = I) and the gradient is exact.
    `kind="randomized"`: a sketch of r + `oversample` columns refined by `power_iters` power
    iterations (GEMMs and thin QRs; randomized_svd_flops counts them), from a generator seeded
    with `seed` (every torchrun rank draws the same sketch; training's RNG is untouched). Where the
    sketch would be as wide as W's smaller side the full SVD is cheaper and exact: it is used.
    """
    import torch

    w = weight.detach().float()
    m, n = w.shape
    k = rank + oversample
    if kind == "randomized" and k < min(m, n):
        return _randomized_right_vectors(w, rank, k, power_iters, seed).to(weight.dtype)
    if kind not in SVD_KINDS:
        raise ValueError(f"unknown SVD kind {kind!r}; known: {', '.join(SVD_KINDS)}")
    full = rank > min(w.shape)
    _, _, vh = torch.linalg.svd(w, full_matrices=full)
    return vh[: min(rank, vh.shape[0])].t().contiguous().to(weight.dtype)


def _randomized_right_vectors(w: torch.Tensor, rank: int, k: int, power_iters: int, seed: int) -> torch.Tensor:
    """Q (n x k) spanning W's top row space, then the SVD of the small W Q (m x k): V = Q Vh_Bᵀ."""
    import torch

    if w.device.type == "meta":  # a shape-only model (the FLOP count): no values to draw
        omega = torch.empty(w.shape[0], k, device=w.device, dtype=w.dtype)
    else:
        gen = torch.Generator(device=w.device)
        gen.manual_seed(seed)
        omega = torch.randn(w.shape[0], k, generator=gen, device=w.device, dtype=w.dtype)
    q, _ = torch.linalg.qr(w.t() @ omega)  # n x k: a basis of Wᵀ's sketched range (W's row space)
    for _ in range(power_iters):  # (WᵀW)^q sharpens the spectrum; re-orthonormalised at each half step
        z, _ = torch.linalg.qr(w @ q)
        q, _ = torch.linalg.qr(w.t() @ z)
    _, _, vh = torch.linalg.svd(w @ q, full_matrices=False)  # m x k: cheap
    return (q @ vh[:rank].t()).contiguous()


class LowRankProjections:
    """The V of every FFN linear, refreshed from the current weights every `every` steps."""

    def __init__(
        self,
        model: torch.nn.Module,
        rank: int,
        every: int,
        modules: Iterable[str] = FFN_LINEARS,
        svd: str = "full",
        oversample: int = 8,
        power_iters: int = 2,
    ):
        self.model, self.rank, self.every = model, rank, every
        self.modules = tuple(modules)
        self.svd, self.oversample, self.power_iters = svd, oversample, power_iters
        self.v: Dict[int, torch.Tensor] = {}  # id(linear) -> V
        self.refreshed_at: Optional[int] = None

    def linears(self) -> Iterator[torch.nn.Linear]:
        for layer in decoder_layers(self.model):
            for name in self.modules:
                yield getattr(layer.mlp, name)

    def state_dict(self) -> Dict[str, object]:
        """V of each linear in model order (ids do not survive a process) and the refresh step."""
        return {"v": [self.v[id(lin)] for lin in self.linears()] if self.v else None, "refreshed_at": self.refreshed_at}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        v = cast(Optional[List["torch.Tensor"]], state["v"])
        self.v = {} if v is None else {id(lin): t for lin, t in zip(self.linears(), v)}
        self.refreshed_at = cast(Optional[int], state["refreshed_at"])

    def due(self, step: int) -> bool:
        last = self.refreshed_at
        return last is None or step - last >= self.every or step < last  # step < last: rolled back

    def refresh(self, step: int, compute: bool = True) -> None:
        """New V from the current weights; `compute=False` only records the step (a numerics-free
        run: no weights to decompose, and an SVD of a 7B's FFN takes ~12 ms)."""
        if compute:  # a randomized sketch is seeded by the step and the linear's place: reproducible
            self.v = {
                id(lin): top_right_singular_vectors(
                    lin.weight, self.rank, self.svd, self.oversample, self.power_iters, seed=step * 1000 + i
                )
                for i, lin in enumerate(self.linears())
            }
        self.refreshed_at = step


def full_svd_flops(m: int, n: int) -> float:
    """A thin SVD of an m x n matrix (m >= n) computing Sigma and V: about 4 m n^2 + 8 n^3
    (Golub & Van Loan, Matrix Computations, 4th ed., Fig. 8.6.1, R-SVD)."""
    m, n = max(m, n), min(m, n)
    return 4 * m * n * n + 8 * n**3


def qr_flops(m: int, k: int) -> float:
    """Householder QR of an m x k matrix (m >= k) with Q formed explicitly: 2 k^2 (m - k/3) for R and
    as much again for Q (Golub & Van Loan, 4th ed., 5.2.2)."""
    return 4 * k * k * (m - k / 3)


def randomized_svd_flops(m: int, n: int, rank: int, oversample: int, power_iters: int) -> float:
    """_randomized_right_vectors' work on an m x n W with k = rank + oversample columns: the sketch
    Wᵀ Omega and 2 GEMMs per power iteration and the final W Q (2 m n k each), 1 + 2 q thin QRs, the
    SVD of the m x k W Q, and V = Q Vh_Bᵀ (2 n k r). Almost all of it is GEMM work."""
    k = rank + oversample
    if k >= min(m, n):
        return full_svd_flops(m, n)
    gemm = 2 * m * n * k * (2 + 2 * power_iters) + 2 * n * k * rank
    qrs = qr_flops(n, k) * (1 + power_iters) + qr_flops(m, k) * power_iters
    return gemm + qrs + full_svd_flops(m, k)


def svd_flops(projections: LowRankProjections) -> float:
    """FLOPs of one refresh of every projected linear, by the kind of SVD it runs."""
    total = 0.0
    for lin in projections.linears():
        m, n = lin.weight.shape
        if projections.svd == "randomized":
            total += randomized_svd_flops(m, n, projections.rank, projections.oversample, projections.power_iters)
        else:
            total += full_svd_flops(m, n)
    return total
