"""The clock at two scales: FLOPs counted by torch, the all-reduce, memory, numerics-free runs."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose_cfg, read_jsonl
from mecefo_exp.methods import REGISTRY
from mecefo_exp.numerics.approx import LowRankProjections, approximations, is_attention_parameter
from mecefo_exp.numerics.model import build_model
from mecefo_exp.plan import NORMAL, Mode
from mecefo_exp.timing import timed_model_cfg
from mecefo_exp.timing.comm import allreduce_s, exposed_comm_s
from mecefo_exp.timing.flops import count_kernels
from mecefo_exp.timing.kernels import FORWARD, KernelBench, micro_batch_kernel
from mecefo_exp.timing.memory import worker_memory

METHODS = list(REGISTRY)


def shape(name):
    return timed_model_cfg(compose_cfg([f"hardware.timing_model={name}"]))


def neighbour_mode(model, rank=64):
    proj = LowRankProjections(model, rank, 200)
    proj.refresh(0)
    return Mode(
        "neighbour",
        contributes=lambda n: not is_attention_parameter(n),
        context=lambda m: approximations(m, True, True, proj),
    )


def counts_for(model, device, micro_batch, seq_len, modes, stream=None):
    bench = KernelBench(model, {m.name: m for m in modes}, device, micro_batch, seq_len, stream)
    kernels = {m.name: micro_batch_kernel(bench, m) for m in modes}
    if any(m.name == "neighbour" for m in modes):  # the neighbour's pair: two micro-batches in one pass
        from mecefo_exp.plan import Sample

        mode = next(m for m in modes if m.name == "neighbour")

        def pair():
            model.zero_grad(set_to_none=True)
            bench.run_mode([Sample(0, 0), Sample(0, 1)], mode)

        kernels["pair"] = pair
    return count_kernels(kernels, model)


def test_llama_1b_flops_are_6NT_plus_attention_scores():
    m = shape("llama_1b")
    model = build_model(m, 32000, 0, device="meta")
    b, s = 2, 256
    c = counts_for(model, torch.device("meta"), b, s, [NORMAL, FORWARD])
    n_matmul = sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name and p.dim() == 2)
    tokens = b * s
    attention_scores = 3 * m.num_hidden_layers * 2 * 2 * s * m.hidden_size * tokens  # QK^T and AV, fwd + 2x bwd
    expected = 6 * n_matmul * tokens + attention_scores
    assert abs(c["normal"]["flops"] / expected - 1) < 0.05, (c["normal"]["flops"], expected)
    assert abs(c["forward"]["flops"] / (expected / 3) - 1) < 0.05


def test_neighbour_pair_flops_are_what_the_mechanism_implies(capsys):
    """llama_1b, all three techniques, r = 64: two forwards, no attention backward, the FFN
    recomputed and its input gradients exact, low-rank FFN weight gradients, the head in full."""
    m = shape("llama_1b")
    model = build_model(m, 32000, 0, device="meta")
    b, s, r = 1, 256, 64
    c = counts_for(model, torch.device("meta"), b, s, [NORMAL, neighbour_mode(model, r)])
    T, h, i, L, V = b * s, m.hidden_size, m.intermediate_size, m.num_hidden_layers, 32000
    attn = 8 * T * h * h + 4 * T * s * h  # q, k, v, o projections + scores, forward, one micro-batch
    ffn = 6 * T * h * i  # gate, up, down forward
    head = 2 * T * h * V
    normal = 3 * (L * (attn + ffn) + head)
    lowrank_w = L * 3 * (2 * (2 * T) * (h + i) * r + 2 * h * i * r)  # x V, G^T (x V), (.) V^T per linear
    pair = 2 * (L * (attn + ffn) + head) + 2 * L * ffn + 2 * L * ffn + lowrank_w + 2 * 2 * head
    assert c["normal"]["flops"] == pytest.approx(normal, rel=0.01)
    assert c["pair"]["flops"] == pytest.approx(pair, rel=0.01)
    ratio = c["pair"]["flops"] / c["normal"]["flops"]
    with capsys.disabled():
        print(f"\nllama_1b neighbour pair / normal micro-batch FLOPs: {ratio:.3f} (mechanism: {pair / normal:.3f})")
    assert 1.4 < ratio < 1.7  # ~1.5x: docs/METHODS.md's 2(a + 3f) / 3(a + f) plus the head


def test_hierarchical_allreduce_matches_the_hand_worked_case():
    hw = OmegaConf.create(
        {
            "gpus_per_node": 8,
            "intra_node_GBps": 300.0,
            "inter_node_GBps": 25.0,
            "intra_latency_s": 5e-6,
            "inter_latency_s": 1e-5,
            "shard": "none",
            "overlap": True,
            "bucket_MB": 25.0,
        }
    )
    # 1 GB over 4 machines x 8 GPUs: 2*7/8 GB / 300 GB/s + 14 hops * 5 us + 2*3/4 GB / 25 GB/s + 6 hops * 10 us
    hand = 0.0058333333 + 7e-5 + 0.06 + 6e-5
    assert allreduce_s(1e9, 32, hw) == pytest.approx(hand, rel=1e-8)
    assert allreduce_s(1e9, 8, hw) == pytest.approx(0.0058333333 + 7e-5, rel=1e-8)  # one machine: NVLink only
    assert allreduce_s(1e9, 1, hw) == 0.0
    # overlap: 50 ms of backward hides all but 15.96 ms; never less than the last 25 MB bucket
    assert exposed_comm_s(1e9, 32, hw, backward_s=0.05) == pytest.approx(hand - 0.05)
    bucket = 0.025 * (0.0058333333 + 0.06) + 7e-5 + 6e-5
    assert exposed_comm_s(1e9, 32, hw, backward_s=10.0) == pytest.approx(bucket, rel=1e-6)
    hw.shard = "full"
    assert allreduce_s(1e9, 32, hw) == pytest.approx(1.5 * hand, rel=1e-8)


def test_meta_accounting_equals_the_cpu_model():
    """FLOPs and saved activation bytes of the tiny model: the shape-only model counts what the real one does."""
    cfg = compose_cfg(["model=llama_tiny", "model.vocab_size=512"])
    real = build_model(cfg.model, 512, 0)
    meta = build_model(cfg.model, 512, 0, device="meta")
    stream = type("Stream", (), {"micro_batch": lambda self, step, owner: torch.randint(0, 512, (2, 33))})()
    on_cpu = counts_for(real, torch.device("cpu"), 2, 32, [NORMAL, neighbour_mode(real, 16)], stream)
    on_meta = counts_for(meta, torch.device("meta"), 2, 32, [NORMAL, neighbour_mode(meta, 16)])
    for kernel in ("normal", "pair"):
        assert on_meta[kernel]["saved_bytes"] == on_cpu[kernel]["saved_bytes"] > 0
        assert on_meta[kernel]["flops"] == on_cpu[kernel]["flops"] > 0
    assert on_meta["pair"]["saved_bytes"] < 2 * on_meta["normal"]["saved_bytes"]  # the point of the techniques


def test_training_batches_take_the_no_mask_path():
    """flops.meta_safe_attention returns transformers' own decision for training batches: no mask."""
    import transformers.models.llama.modeling_llama as llama

    cfg = compose_cfg(["model=llama_tiny", "model.vocab_size=512"])
    model = build_model(cfg.model, 512, 0)
    seen = []
    original = llama.create_causal_mask

    def spy(**kwargs):
        seen.append(original(**kwargs))
        return seen[-1]

    llama.create_causal_mask = spy
    try:
        model(input_ids=torch.randint(0, 512, (3, 32)))
    finally:
        llama.create_causal_mask = original
    assert seen == [None]


def test_7b_fp32_replicas_do_not_fit_in_80_GB():
    hw = OmegaConf.create({"compute_dtype": "fp32", "grad_dtype": "fp32", "shard": "none", "memory_GB": 80.0})
    mem = worker_memory(6_738_415_616, hw, 32, normal_bytes=0.0)
    assert mem["static_GB"] == pytest.approx(6_738_415_616 * 16 / 1e9)  # weights 4 + grads 4 + Adam 8 bytes
    assert not mem["fits"]["normal"]
    hw.shard = "optimizer"  # ZeRO-1 over 32 workers: weights and grads 8 B, Adam 8/32 B per parameter
    assert worker_memory(6_738_415_616, hw, 32, normal_bytes=0.0)["fits"]["normal"]


@pytest.mark.slow  # counts the FLOPs of a 7B shape (~7 s in a fresh clone): `make test-fingerprints`
def test_7b_run_reports_it_does_not_fit(run_exp):
    summary, _ = run_exp(
        "model=llama_7b",
        "hardware=a100_32",
        "hardware.compute_dtype=fp32",
        "trainer.numerics=false",
        "cluster.n_workers=32",
        "data.micro_batch=1",
        "data.seq_len=256",
        "trainer.max_steps=3",
        "method=checkpoint",
        "failure=none",
        "trainer.progress=none",
        micro=False,
    )
    assert summary["status"] == "ok" and summary["numerics"] is False
    assert summary["memory"]["fits"] == {"normal": False, "naive": False}
    assert summary["clock"]["efficiency_source"].startswith("calibrated")


@pytest.mark.parametrize("method", METHODS)
def test_numerics_free_run_walks_the_same_clock(run_exp, method):
    common = [f"method={method}", "failure=high", "seed=3", "trainer.max_steps=16"]
    if method in ("checkpoint", "bamboo", "oobleck", "mecefo"):
        common.append("method.checkpoint_interval=4")
    full, full_dir = run_exp(*common)
    free, free_dir = run_exp(*common, "trainer.numerics=false", "trainer.event_driven=false")  # a row per step
    rows = read_jsonl(full_dir / "metrics.jsonl")
    rows_free = read_jsonl(free_dir / "metrics.jsonl")
    assert [(r["step"], r["sim_time_s"], r["step_cost_s"]) for r in rows] == [
        (r["step"], r["sim_time_s"], r["step_cost_s"]) for r in rows_free
    ]
    assert all("loss" not in r for r in rows_free) and all(math.isfinite(r["loss"]) for r in rows)
    strip = lambda ev: [(e["sim_time_s"], e["step"], e["kind"], e["worker"]) for e in ev]  # noqa: E731
    assert strip(read_jsonl(full_dir / "events.jsonl")) == strip(read_jsonl(free_dir / "events.jsonl"))
    for key in ("sim_time_s", "time_breakdown", "failures", "rollbacks", "lost_steps", "interrupted_steps"):
        assert free[key] == full[key], key
    assert full["failures"] > 0 and free["final_val_ppl"] is None and free["numerics"] is False


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["trainer.numerics=false", "hardware=measured"], "measuring this machine needs the model's numerics"),
        (["hardware=measured", "hardware.timing_model=llama_1b"], "a measured profile times the run's own model"),
        (["hardware.timing_model=llama_2b"], "allowed: llama_130m"),
        (["trainer.numerics=false", "resume=true"], "keeps no checkpoints"),
        (["hardware.shard=zero3"], "allowed: none, optimizer, gradients, full"),
        (["failure.unit_gpus=3"], "must be >= 1 and divide cluster.n_workers=8"),
    ],
)
def test_bad_clock_settings_are_one_line_errors(overrides, words):
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match=words):
        validate(compose_cfg(overrides))
