"""On a GPU: the CUDA paths. Skipped where no CUDA device is visible (never run in
this project's CI, which has none); on a GPU machine: `pytest -m cuda`."""

import pytest
import torch

from conftest import MECEFO_RANK_8, losses_by_step

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")]


def test_bf16_on_cuda_trains_with_fused_adamw_and_reports_mfu(run_exp, fixed_profile):
    from mecefo_exp.timing.peaks import peak_tflops

    summary, run_dir = run_exp(
        "cluster.device=cuda",
        "trainer.precision=bf16",
        "method=checkpoint",
        "failure=none",
        f"cluster.profile={fixed_profile()}",
    )
    losses = losses_by_step(run_dir)
    assert summary["status"] == "ok" and losses[max(losses)] < losses[0]
    known = peak_tflops(torch.cuda.get_device_name(0), "bf16") is not None
    assert (summary["mfu"] is not None) == known and summary["achieved_tflops_s"] > 0


def test_exact_methods_stay_exact_on_cuda(run_exp, fixed_profile):
    common = [
        "cluster.device=cuda",
        "trainer.precision=bf16",
        "method=checkpoint",
        f"cluster.profile={fixed_profile()}",
    ]
    free, free_dir = run_exp(*common, "failure=none")
    hit, hit_dir = run_exp(*common, "failure=high")
    assert hit["rollbacks"] >= 1 and losses_by_step(hit_dir) == losses_by_step(free_dir)


def test_two_accumulation_chunks_on_cuda_give_the_same_loss_curve(run_exp, fixed_profile):
    common = [
        "cluster.device=cuda",
        "method=mecefo",
        "method.rank=8",
        "failure=high",
        "data.micro_batch=4",
        f"cluster.profile={fixed_profile(MECEFO_RANK_8)}",
    ]
    _, one = run_exp(*common, "trainer.grad_accum=1")
    _, two = run_exp(*common, "trainer.grad_accum=2")
    a, b = losses_by_step(one), losses_by_step(two)
    assert a.keys() == b.keys() and all(b[s] == pytest.approx(a[s], rel=1e-3) for s in a)
