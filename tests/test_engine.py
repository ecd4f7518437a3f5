"""The simulated cluster computes what data-parallel training computes."""

import copy

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model, tiny_stream
from mecefo_exp.numerics.executor import LocalCluster
from mecefo_exp.plan import NORMAL, Plan, Sample, WorkItem

N, B, T = 4, 2, 16


def _model(seed=0):
    return tiny_model(seed)


def _stream():
    return tiny_stream(N, B, T)


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def _plan(step, assign):
    """assign: computing worker -> owners whose micro-batches it computes."""
    return Plan(step, {w: [WorkItem(Sample(step, o)) for o in owners] for w, owners in assign.items()})


def test_n_worker_gradient_equals_single_process_gradient_on_the_concatenated_batch():
    model, stream = _model(), _stream()
    reference = copy.deepcopy(model)
    result = LocalCluster(model, stream, {"normal": NORMAL}, torch.device("cpu")).execute(
        _plan(5, {w: [w] for w in range(N)})
    )
    simulated = _grads(model)

    batch = torch.cat([stream.micro_batch(5, w) for w in range(N)])  # [N*B, T+1]
    logits = reference(input_ids=batch[:, :-1]).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    loss.backward()
    for name, p in reference.named_parameters():
        torch.testing.assert_close(simulated[name], p.grad, rtol=1e-4, atol=1e-7, msg=name)
    assert result.loss == pytest.approx(loss.item(), rel=1e-5)
    assert set(result.contributors.values()) == {N}


def test_who_computes_a_micro_batch_does_not_change_a_bit():
    stream = _stream()
    m1, m2 = _model(), _model()
    LocalCluster(m1, stream, {"normal": NORMAL}, torch.device("cpu")).execute(_plan(2, {w: [w] for w in range(N)}))
    # worker 1 failed: worker 2 computes its own and worker 1's; worker 0 computes 3's
    LocalCluster(m2, stream, {"normal": NORMAL}, torch.device("cpu")).execute(_plan(2, {2: [2, 1], 0: [3, 0]}))
    for (name, a), b in zip(_grads(m1).items(), _grads(m2).values()):
        assert torch.equal(a, b), name


def test_chunked_execution_matches_one_batch():
    stream = _stream()
    m1, m2 = _model(), _model()
    LocalCluster(m1, stream, {"normal": NORMAL}, torch.device("cpu")).execute(_plan(0, {w: [w] for w in range(N)}))
    LocalCluster(m2, stream, {"normal": NORMAL}, torch.device("cpu"), chunk_microbatches=1).execute(
        _plan(0, {w: [w] for w in range(N)})
    )
    for (name, a), b in zip(_grads(m1).items(), _grads(m2).values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7, msg=name)


def test_contributor_counts_average_each_parameter_over_its_own_contributors():
    from mecefo_exp.plan import Mode

    stream = _stream()
    no_attn = Mode("no_attn", contributes=lambda name: "self_attn" not in name)
    model, only_normal = _model(), _model()
    plan = Plan(
        1,
        {
            0: [WorkItem(Sample(1, 0))],
            1: [WorkItem(Sample(1, 1), "no_attn")],
            2: [WorkItem(Sample(1, 2))],
            3: [WorkItem(Sample(1, 3), "no_attn")],
        },
    )
    result = LocalCluster(model, stream, {"normal": NORMAL, "no_attn": no_attn}, torch.device("cpu")).execute(plan)
    assert result.contributors["model.layers.0.self_attn.q_proj.weight"] == 2
    assert result.contributors["model.layers.0.mlp.up_proj.weight"] == 4
    # attention weights: the mean over micro-batches 0 and 2 alone, bit for bit
    LocalCluster(only_normal, stream, {"normal": NORMAL}, torch.device("cpu")).execute(_plan(1, {0: [0], 2: [2]}))
    got, want = _grads(model), _grads(only_normal)
    for name in got:
        if "self_attn" in name:
            assert torch.equal(got[name], want[name]), name
    # every parameter trains again afterwards
    assert all(p.requires_grad for p in model.parameters())
