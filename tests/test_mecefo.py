"""MeCeFO: the three approximations do what the paper says, and nothing while nobody fails."""

import json

import pytest
import torch
import torch.nn.functional as F
from test_engine import N, _grads, _model, _plan, _stream

from conftest import MECEFO_RANK_8, losses_by_step, read_jsonl
from mecefo_exp.numerics.approx import (
    LowRankProjections,
    LowRankWeightGradLinear,
    approximations,
    is_attention_parameter,
    top_right_singular_vectors,
)
from mecefo_exp.numerics.executor import LocalCluster
from mecefo_exp.plan import NORMAL, Mode, Plan, Sample, WorkItem


def _loss(model, batch):
    logits = model(input_ids=batch[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def test_ffn_recomputation_alone_changes_nothing():
    stream = _stream()
    a, b = _model(), _model()
    batch = stream.micro_batch(0, 0)
    la = _loss(a, batch)
    la.backward()
    with approximations(b, skip_attention=False, recompute_ffn=True, projections=None):
        lb = _loss(b, batch)
        lb.backward()
    assert torch.equal(la, lb)
    for (name, ga), gb in zip(_grads(a).items(), _grads(b).values()):
        assert torch.equal(ga, gb), name


def test_skip_attention_keeps_the_loss_exact_and_gives_attention_no_gradient():
    stream = _stream()
    a, b = _model(), _model()
    batch = stream.micro_batch(0, 0)
    la = _loss(a, batch)
    with approximations(b, skip_attention=True, recompute_ffn=False, projections=None):
        lb = _loss(b, batch)
        lb.backward()
    torch.testing.assert_close(la, lb, rtol=0, atol=1e-6)  # forward exact
    for name, p in b.named_parameters():
        if is_attention_parameter(name):
            assert p.grad is None, name
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    # and the model is untouched afterwards: attention trains again
    _loss(b, batch).backward()
    assert b.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_lowrank_gradient_equals_the_formula_and_keeps_the_input_gradient_exact():
    torch.manual_seed(0)
    w = torch.randn(24, 16, requires_grad=True)
    x = torch.randn(3, 5, 16, requires_grad=True)
    gy = torch.randn(3, 5, 24)
    v = top_right_singular_vectors(w, rank=4)
    assert v.shape == (16, 4)
    torch.testing.assert_close(v.t() @ v, torch.eye(4), atol=1e-5, rtol=0)
    LowRankWeightGradLinear.apply(x, w, v).backward(gy)
    g2, x2 = gy.reshape(-1, 24), x.detach().reshape(-1, 16)
    torch.testing.assert_close(w.grad, (g2.t() @ (x2 @ v)) @ v.t())  # the formula
    torch.testing.assert_close(x.grad, gy @ w.detach())  # exact input gradient
    exact = g2.t() @ x2
    assert not torch.allclose(w.grad, exact, atol=1e-3)  # rank 4 really is an approximation


@pytest.mark.parametrize("shape", [(24, 16), (16, 24)])
def test_lowrank_gradient_is_exact_at_full_rank(shape):
    torch.manual_seed(1)
    w = torch.randn(*shape, requires_grad=True)
    x = torch.randn(7, shape[1])
    gy = torch.randn(7, shape[0])
    v = top_right_singular_vectors(w, rank=shape[1])
    LowRankWeightGradLinear.apply(x, w, v).backward(gy)
    torch.testing.assert_close(w.grad, gy.t() @ x, rtol=1e-4, atol=1e-5)


def test_lowrank_ffn_in_the_model_full_rank_matches_exact_and_input_grad_is_exact():
    stream = _stream()
    a, b = _model(), _model()
    batch = stream.micro_batch(1, 2)
    _loss(a, batch).backward()
    proj = LowRankProjections(b, rank=10_000, every=1)  # rank above every dimension: exact
    proj.refresh(0)
    with approximations(b, skip_attention=False, recompute_ffn=True, projections=proj):
        _loss(b, batch).backward()
    for (name, ga), gb in zip(_grads(a).items(), _grads(b).values()):
        torch.testing.assert_close(gb, ga, rtol=1e-3, atol=1e-6, msg=name)


def test_neighbor_aggregation_averages_attention_over_the_others_only():
    """Worker 1 failed, worker 2 covers: attention = mean over workers 0 and 3 exactly."""
    stream = _stream()
    model, reference = _model(), _model()
    mode = Mode(
        "mecefo",
        contributes=lambda n: not is_attention_parameter(n),
        context=lambda m: approximations(m, True, True, None),
    )
    plan = Plan(
        3,
        {
            0: [WorkItem(Sample(3, 0))],
            3: [WorkItem(Sample(3, 3))],
            2: [WorkItem(Sample(3, 2), "mecefo"), WorkItem(Sample(3, 1), "mecefo")],
        },
        degraded=True,
    )
    result = LocalCluster(model, stream, {"normal": NORMAL, "mecefo": mode}, torch.device("cpu")).execute(plan)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert result.contributors[q] == N - 2 and result.contributors["model.layers.0.mlp.up_proj.weight"] == N
    LocalCluster(reference, stream, {"normal": NORMAL}, torch.device("cpu")).execute(_plan(3, {0: [0], 3: [3]}))
    got, want = _grads(model), _grads(reference)
    for name in got:
        if is_attention_parameter(name):
            assert torch.equal(got[name], want[name]), name
    # FFN weights average four micro-batches, two of them approximate: not the normal-only mean
    assert not torch.equal(got["model.layers.0.mlp.up_proj.weight"], want["model.layers.0.mlp.up_proj.weight"])


def test_no_failure_is_the_plain_engine_bit_for_bit(run_exp, fixed_profile):
    prof = fixed_profile(
        {
            "mb:mecefo[sa=1,rc=1,lr=1,r=64]": 0.012,
            "neighbor_pair[sa=1,rc=1,lr=1,r=64]": 0.016,
            "mecefo_svd[sa=1,rc=1,lr=1,r=64]": 0.004,
        }
    )
    _, plain = run_exp("method=checkpoint", "failure=none", f"cluster.profile={prof}")
    summary, mecefo = run_exp("method=mecefo", "failure=none", f"cluster.profile={prof}")
    assert losses_by_step(mecefo) == losses_by_step(plain)
    assert summary["degraded_steps"] == 0


def test_failure_high_run_assigns_neighbors_and_measures_the_gradient_error(run_exp, fixed_profile):
    prof = fixed_profile(MECEFO_RANK_8)
    free, _ = run_exp("method=mecefo", "method.rank=8", "failure=none", f"cluster.profile={prof}")
    summary, run_dir = run_exp(
        "method=mecefo",
        "method.rank=8",
        "method.grad_error_every=1",
        "failure=high",
        f"cluster.profile={prof}",
        "trainer.max_steps=24",
    )
    events = read_jsonl(run_dir / "events.jsonl")
    neighbors = [e for e in events if e["kind"] == "neighbor"]
    assert summary["failures"] >= 1 and neighbors and summary["degraded_steps"] > 0
    for e in neighbors:
        assert e["detail"]["neighbor"] != e["worker"]
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl")]
    degraded = [r for r in rows if r["degraded"]]
    assert degraded and all(r["step_cost_s"] > rows[0]["step_cost_s"] for r in degraded if r["alive"] < 4)
    errors = read_jsonl(run_dir / "grad_error.jsonl")
    assert len(errors) == summary["grad_error_checks"] >= 1
    assert all(0 < e["rel_error"] < 1.5 for e in errors)
    assert summary["time_breakdown"]["degraded_extra"] > 0
    assert summary["final_val_ppl"] > 0 and summary["throughput_tok_s"] > 0


def test_no_eligible_neighbor_falls_back_to_rollback(run_exp, fixed_profile, tmp_path):
    trace = tmp_path / "both.csv"
    trace.write_text("time,worker,event\n3.2,0,fail\n3.5,1,fail\n6,0,recover\n6.5,1,recover\n")
    prof = fixed_profile(
        {
            "mb:mecefo[sa=1,rc=1,lr=1,r=64]": 0.012,
            "neighbor_pair[sa=1,rc=1,lr=1,r=64]": 0.016,
            "mecefo_svd[sa=1,rc=1,lr=1,r=64]": 0.004,
        }
    )
    summary, run_dir = run_exp(
        "method=mecefo",
        "cluster.n_workers=2",
        "failure=trace",
        "failure.unit=steps",
        f"failure.path={trace}",
        f"cluster.profile={prof}",
        "method.checkpoint_interval=2",
    )
    kinds = [e["kind"] for e in read_jsonl(run_dir / "events.jsonl")]
    assert "neighbor" in kinds and "fatal" in kinds and "rollback" in kinds
    assert summary["fatal"] == 1 and summary["rollbacks"] == 1 and summary["status"] == "ok"


# ------------------------------------------------------------ the SVD refresh: full or randomized
def _decaying(m, n, seed=0):
    """A W (m x n) with a geometrically decaying spectrum, and its true right singular vectors."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(m, n, generator=g))
    v, _ = torch.linalg.qr(torch.randn(n, n, generator=g))
    s = 0.9 ** torch.arange(n, dtype=torch.float32)
    return u @ torch.diag(s) @ v.t(), v


def test_randomized_right_singular_vectors_span_the_full_svds_subspace():
    w, _ = _decaying(96, 64)
    full = top_right_singular_vectors(w, 8, "full")
    rand = top_right_singular_vectors(w, 8, "randomized", oversample=8, power_iters=2, seed=3)
    assert rand.shape == full.shape == (64, 8)
    assert torch.allclose(rand.t() @ rand, torch.eye(8), atol=1e-5)  # orthonormal
    cos = torch.linalg.svdvals(full.t() @ rand)  # cosines of the principal angles
    assert cos.min() > 0.999, cos


def test_a_randomized_refresh_is_reproducible_and_leaves_the_training_rng_alone():
    w, _ = _decaying(96, 64)
    state = torch.get_rng_state()
    a = top_right_singular_vectors(w, 8, "randomized", seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, top_right_singular_vectors(w, 8, "randomized", seed=5))
    # a sketch as wide as W's smaller side: the exact full SVD is used
    assert torch.equal(top_right_singular_vectors(w, 60, "randomized"), top_right_singular_vectors(w, 60, "full"))


def test_the_refresh_flop_formulas():
    from mecefo_exp.numerics.projections import full_svd_flops, randomized_svd_flops

    m, n, r = 11008, 4096, 64  # a 7B FFN weight at rank 64
    full, rand = full_svd_flops(m, n), randomized_svd_flops(m, n, r, 8, 2)
    assert full == 4 * m * n * n + 8 * n**3 and full_svd_flops(n, m) == full
    gemms = 2 * m * n * (r + 8) * 6
    assert gemms < rand < 1.1 * gemms  # GEMM work, almost all of it
    assert rand < full / 30  # 40 against 1,288 GFLOP
    assert randomized_svd_flops(96, 64, 60, 8, 2) == full_svd_flops(96, 64)  # the fall-back to the full SVD


def test_a_randomized_refresh_is_its_own_kernel_charged_at_rsvd_efficiency(run_exp):
    common = [
        "method=mecefo",
        "method.rank=8",
        "trainer.numerics=false",
        "failure=none",
        "trainer.max_steps=1",
        "trainer.eval_every=0",
        "hardware=a100_32",
        "cluster.n_workers=32",
        "hardware.svd_efficiency=0.001",
        "hardware.rsvd_efficiency=0.05",
    ]
    summaries = {}
    for svd in ("full", "randomized"):
        summary, run_dir = run_exp(*common, f"method.svd={svd}")
        summaries[svd] = json.loads((run_dir / "profile.json").read_text())
    full, rand = summaries["full"], summaries["randomized"]
    fk = next(k for k in full["kernels"] if k.startswith("mecefo_svd["))
    rk = next(k for k in rand["kernels"] if k.startswith("mecefo_rsvd["))
    assert rk.endswith(",p=8,q=2]") and not any(k.startswith("mecefo_svd[") for k in rand["kernels"])
    peak = 312e12
    assert full["kernels"][fk] == pytest.approx(full["meta"]["flops"][fk] / (peak * 0.001))
    assert rand["kernels"][rk] == pytest.approx(rand["meta"]["flops"][rk] / (peak * 0.05))
    # the sketch's formula, not the full SVD's fall-back (at these tiny widths the sketch costs more)
    assert rand["meta"]["flops"][rk] != full["meta"]["flops"][fk]
