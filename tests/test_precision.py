"""On the CPU: trainer.precision (bf16 autocast) and trainer.grad_accum."""

import pytest
import torch

from conftest import MECEFO_RANK_8, MICRO, ROOT, compose_cfg, losses_by_step, read_jsonl, tiny_model, tiny_stream
from mecefo_exp.numerics.approx import LowRankProjections, approximations, is_attention_parameter
from mecefo_exp.numerics.executor import LocalCluster
from mecefo_exp.plan import NORMAL, Mode, Plan, Sample, WorkItem

N, B, T = 4, 4, 16


def _model(seed=0):
    return tiny_model(seed)


def _stream():
    return tiny_stream(N, B, T)


def _modes(model, rank=8):
    projections = LowRankProjections(model, rank, every=100)
    projections.refresh(0)
    mecefo = Mode(
        "mecefo",
        contributes=lambda name: not is_attention_parameter(name),
        context=lambda m: approximations(m, projections=projections),
        kernel="mb:mecefo",
    )
    return {"normal": NORMAL, "mecefo": mecefo}


def _grads_after(plan, grad_accum, precision="fp32"):
    model = _model()
    cluster = LocalCluster(
        model, _stream(), _modes(model), torch.device("cpu"), grad_accum=grad_accum, precision=precision
    )
    result = cluster.execute(plan)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, result


# worker 1 failed: worker 2 (its neighbour) computes both micro-batches under MeCeFO's approximations
NEIGHBOUR = Plan(
    3,
    {
        0: [WorkItem(Sample(3, 0))],
        3: [WorkItem(Sample(3, 3))],
        2: [WorkItem(Sample(3, 2), "mecefo"), WorkItem(Sample(3, 1), "mecefo")],
    },
    degraded=True,
)
EXACT = Plan(3, {w: [WorkItem(Sample(3, w))] for w in range(N)})


@pytest.mark.parametrize("plan", [EXACT, NEIGHBOUR], ids=["exact", "mecefo_neighbour"])
def test_two_accumulation_chunks_give_the_gradient_of_one_micro_batch(plan):
    one, r1 = _grads_after(plan, grad_accum=1)
    two, r2 = _grads_after(plan, grad_accum=2)  # micro_batch 4 as two chunks of 2 sequences
    four, _ = _grads_after(plan, grad_accum=4)
    assert one.keys() == two.keys() == four.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-7, msg=name)
        torch.testing.assert_close(four[name], one[name], rtol=1e-5, atol=1e-7, msg=name)
    assert float(r2.loss) == pytest.approx(float(r1.loss), rel=1e-6) and r2.tokens == r1.tokens


def test_bf16_autocast_keeps_fp32_weights_and_grads_and_is_close_to_fp32():
    for plan in (EXACT, NEIGHBOUR):
        fp32, r32 = _grads_after(plan, grad_accum=1)
        bf16, r16 = _grads_after(plan, grad_accum=2, precision="bf16")  # the low-rank backward mixes dtypes
        assert all(g.dtype == torch.float32 for g in bf16.values())
        assert float(r16.loss) == pytest.approx(float(r32.loss), rel=2e-2)
        total = torch.cat([g.flatten() for g in fp32.values()])
        diff = torch.cat([(bf16[n] - fp32[n]).flatten() for n in fp32])
        assert (diff.norm() / total.norm()).item() < 0.05  # bf16 rounding, not a different gradient


def test_bf16_runs_train_and_the_exact_methods_stay_exact_against_bf16_failure_free(run_exp, fixed_profile):
    common = ["trainer.precision=bf16", "trainer.max_steps=12", f"cluster.profile={fixed_profile()}"]
    free, free_dir = run_exp("method=checkpoint", "failure=none", *common)
    hit, hit_dir = run_exp("method=checkpoint", "failure=high", *common)
    losses = losses_by_step(free_dir)
    assert losses[11] < losses[0] - 0.1  # it trains
    assert hit["rollbacks"] >= 1 and losses_by_step(hit_dir) == losses  # every committed step, bit for bit
    assert hit["final_val_loss"] == free["final_val_loss"]


def test_precision_and_accumulation_are_checked_before_compute():
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match=r"trainer.precision='fp16': allowed: fp32, bf16, tf32"):
        validate(compose_cfg([*MICRO, "trainer.precision=fp16"]))
    with pytest.raises(ConfigError, match=r"trainer.grad_accum=3: must be >= 1 and divide data.micro_batch=2"):
        validate(compose_cfg([*MICRO, "trainer.grad_accum=3"]))
    validate(compose_cfg([*MICRO, "trainer.grad_accum=2"]))


# ---------------------------------------------------------------- FLOP/s and MFU in the record
def test_the_peak_table_knows_the_paper_and_lent_gpus_by_their_cuda_names():
    from mecefo_exp.timing.peaks import peak_tflops

    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 312.0
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0  # the more specific entry wins
    assert peak_tflops("NVIDIA H200", "tf32") == 494.5
    assert peak_tflops("Tesla T4", "bf16") is None and peak_tflops("NVIDIA A100-SXM4-80GB", "fp8") is None


def test_the_clocks_gpu_presets_and_the_mfu_table_give_one_peak():
    """A run's clock (conf/hardware) and its MFU (timing/peaks.py) divide by the same peak."""
    from omegaconf import OmegaConf

    from mecefo_exp.timing.peaks import peak_tflops

    gpus = {"a100": "NVIDIA A100-SXM4-80GB", "h100": "NVIDIA H100 80GB HBM3"}
    checked = 0
    for preset in sorted((ROOT / "conf" / "hardware").glob("*.yaml")):
        hw = OmegaConf.load(preset)
        gpu = next((name for key, name in gpus.items() if key in preset.stem), None)
        if gpu is None or hw.get("peak_tflops") is None:
            continue
        assert hw.peak_tflops == peak_tflops(gpu, "bf16"), preset.name
        checked += 1
    assert checked >= 3  # a100_32, h100_8, llama3_h100 at least


def test_every_step_records_its_achieved_flops_and_a_cpu_has_no_mfu(run_exp, fixed_profile):
    summary, run_dir = run_exp("method=checkpoint", "failure=none", f"cluster.profile={fixed_profile()}")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert all(r["tflops_s"] > 0 and r["mfu"] is None for r in rows)
    assert summary["achieved_tflops_s"] > 0 and summary["mfu"] is None


# ---------------------------------------------------------------- trainer.compile
@pytest.mark.slow  # torch.compile's first graph takes ~40 s on 2 cores
def test_compile_on_and_off_give_the_same_loss_curve_with_mecefos_neighbour_running_eagerly(
    run_exp, fixed_profile, tmp_path
):
    trace = tmp_path / "t.csv"
    trace.write_text("time,worker,event\n2.5,1,fail\n6.5,1,recover\n")
    prof = fixed_profile(MECEFO_RANK_8)
    common = [
        "method=mecefo",
        "method.rank=8",
        "failure=trace",
        "failure.unit=steps",
        f"failure.path={trace}",
        "trainer.max_steps=8",
        "trainer.eval_every=0",
        f"cluster.profile={prof}",
    ]
    eager, eager_dir = run_exp(*common)
    compiled, compiled_dir = run_exp(*common, "trainer.compile=true")
    assert compiled["degraded_steps"] == eager["degraded_steps"] > 0
    a, b = losses_by_step(eager_dir), losses_by_step(compiled_dir)
    assert a.keys() == b.keys()
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), step
