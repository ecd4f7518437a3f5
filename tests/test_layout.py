"""The hybrid layout clock (timing/layout.py): the stage split, the 1F1B bubble, the TP and PP
traffic, the memory of Llama 3 405B at TP8 x PP16, all against figures worked by hand here; the
per-layer counting against the whole model; the layout's settings refused in one line."""

import pytest
import torch

from conftest import compose_cfg, read_jsonl
from mecefo_exp.config import AttrDict, ConfigError, stage_layers, validate
from mecefo_exp.methods import REGISTRY
from mecefo_exp.timing.layout import LayerParts, layout_memory, layout_step, parts_from_counts

#: a cluster whose numbers make the arithmetic easy: 1 TFLOP/s reached in full, links in round GB/s
HW = AttrDict(
    peak_tflops=1.0,
    compute_dtype="bf16",
    grad_dtype="fp32",
    shard="none",
    overlap=True,
    bucket_MB=25.0,
    gpus_per_node=8,
    intra_node_GBps=2.097152,
    inter_node_GBps=2.097152,
    intra_latency_s=0.0,
    inter_latency_s=0.0,
    hbm_GBps=1e12,
    memory_GB=80.0,
)
#: one micro-batch of 1 x 1024 tokens at hidden 1024 in bf16: 2 MiB of activations = 1 ms on the links above
ACT = dict(micro_batch=1, seq_len=1024, hidden=1024)


def parts(layer_flops=1e12, rest_flops=0.0, layer_params=0, embed=0, head=0, layer_saved=0.0, rest_saved=0.0):
    # forward = a third of forward + backward (backward does twice the forward's matmuls)
    return LayerParts(
        layer_flops=layer_flops,
        layer_forward_flops=layer_flops / 3,
        layer_saved=layer_saved,
        layer_params=layer_params,
        rest_flops=rest_flops,
        rest_forward_flops=rest_flops / 3,
        rest_saved=rest_saved,
        embed_params=embed,
        head_params=head,
    )


def test_stage_split():
    assert stage_layers(8, 4) == [2, 2, 2, 2]
    assert stage_layers(8, 1) == [8]
    # Llama 3 405B: 126 layers on 16 stages, the first and last one layer fewer (paper, Section 3.3.2)
    assert stage_layers(126, 16, "llama3") == [7] + [8] * 14 + [7]


def test_1f1b_bubble_and_stage_time_by_hand():
    """8 layers of 1 s (forward + backward) on 4 stages: 2 s a micro-batch per stage, plus 1 ms each
    way to the next stage; 1F1B with 8 micro-batches: 8 + 4 - 1 = 11 slots of 2.002 s, 3 of them bubble."""
    step = layout_step(parts(), 8, HW, dict(tp=1, pp=4, dp=1, microbatches=8), 1.0, **ACT)
    assert step["stage_layers"] == [2, 2, 2, 2]
    assert step["slot_s"] == pytest.approx(2.002)
    assert step["pipeline_s"] == pytest.approx(11 * 2.002)
    assert step["bubble_s"] == pytest.approx(3 * 2.002)
    assert step["bubble_fraction"] == pytest.approx(3 / 11)
    assert step["step_s"] == pytest.approx(22.022)  # one replica: no gradient exchange; no parameters to update
    # in flight under 1F1B: 4, 3, 2, 1 micro-batches from the first stage on
    assert [s["in_flight"] for s in step["stages"]] == [4, 3, 2, 1]
    # the output head (1e12 FLOPs) sits on the last stage, which becomes the slowest: 3.002 s slots
    head = layout_step(parts(rest_flops=1e12), 8, HW, dict(tp=1, pp=4, dp=1, microbatches=8), 1.0, **ACT)
    assert [s["compute_s"] for s in head["stages"]] == pytest.approx([2, 2, 2, 3])
    assert head["pipeline_s"] == pytest.approx(11 * 3.002)
    # more micro-batches shrink the bubble: (p - 1) / (m + p - 1)
    long = layout_step(parts(), 8, HW, dict(tp=1, pp=4, dp=1, microbatches=32), 1.0, **ACT)
    assert long["bubble_fraction"] == pytest.approx(3 / 35)


def test_tensor_parallel_traffic_by_hand():
    """TP2, one stage of 8 layers: compute halves (4 s); per layer 4 ring all-reduces of 2 MiB among 2
    GPUs, each 2 x 1/2 x 2 MiB at 2 MiB/ms = 1 ms, plus one for the embedding: 33 ms a micro-batch."""
    step = layout_step(parts(), 8, HW, dict(tp=2, pp=1, dp=1, microbatches=2), 1.0, **ACT)
    (stage,) = step["stages"]
    assert stage["compute_s"] == pytest.approx(4.0)
    assert stage["tp_comm_s"] == pytest.approx(0.033)
    assert stage["p2p_s"] == 0.0
    assert step["step_s"] == pytest.approx(2 * 4.033)
    assert step["bubble_fraction"] == 0.0


def test_data_parallel_exchange_by_hand():
    """dp=2 on two nodes (tp=8 fills a node): each GPU all-reduces its shard, 2^20 parameters x 4 bytes
    (fp32 gradients) = 4 MiB, with its peer on the other node over 1/8 of the node's link (the node's
    8 TP groups share it): 2 x 1/2 x 4 MiB / (2 MiB/ms / 8) = 16 ms. The last micro-batch's backward
    (2/3 x 1e12 FLOPs / 8 GPUs at 1 TFLOP/s = 83 ms) would hide it, but the last bucket (here all of
    it: 4 MiB < 25 MB) is exchanged after backward ends (comm.py): 16 ms stay exposed."""
    step = layout_step(parts(layer_params=8 * 2**20 // 1), 1, HW, dict(tp=8, pp=1, dp=2, microbatches=1), 1.0, **ACT)
    (stage,) = step["stages"]
    assert stage["params_per_gpu"] == 2**20
    assert stage["dp_comm_s"] == pytest.approx(0.016)


def test_memory_of_405b_at_tp8_pp16_by_hand():
    """Llama 3 405B, TP8 x PP16 x DP128, 16 micro-batches of one 8,192-token sequence, bf16 weights
    with fp32 gradients, master weights and Adam moments sharded over the 128 replicas (ZeRO-1).

    Parameters (Table 3's shape): a layer has attention 2 x 16384^2 (q, o) + 2 x 16384 x 1024 (k, v,
    8 KV heads of 128) = 570,425,344, an MLP of 3 x 16384 x 53248 = 2,617,245,696 and two norms of
    16,384: 3,187,703,808; the embedding and the head 128,256 x 16,384 = 2,101,346,304 each.
    Activations: the test's input, 34 s b h bytes a layer (Korthikanti et al. 2022's count without
    the attention scores, which flash attention does not keep) = 34 x 8192 x 16384 = 4,563,402,752.

    Stage split 7, 8 x 14, 7. In flight under 1F1B: 16 on stage 0, 15 on stage 1. Per GPU:
    stage 0: 7 layers + embedding = 24,415,272,960 / 8 = 3,051,909,120 params; 7 x 16 = 112 layer-batches
    stage 1: 8 layers = 25,501,630,464 / 8 = 3,187,703,808 params; 8 x 15 = 120 layer-batches (the peak)
    Stage 1: static 3,187,703,808 x (2 bf16 weights + 4 fp32 grads + (4 master + 8 Adam) / 128)
    = 3,187,703,808 x 6.09375 = 19,425,070,080 bytes; activations 120 x 4,563,402,752 / 8 (TP splits
    them) = 68,451,041,280 bytes; peak 87,876,111,360 bytes = 87.88 GB > 80 GB: out of memory.
    """
    layer, vocab = 3_187_703_808, 128_256 * 16_384
    hw = AttrDict(HW, shard="optimizer")
    step = layout_step(
        parts(layer_params=layer, embed=vocab, head=vocab + 16_384, layer_saved=4_563_402_752),
        126,
        hw,
        dict(tp=8, pp=16, dp=128, microbatches=16, split="llama3"),
        1.0,
        micro_batch=1,
        seq_len=8192,
        hidden=16384,
    )
    assert step["stages"][0]["params_per_gpu"] == 3_051_909_120
    assert step["stages"][1]["params_per_gpu"] == 3_187_703_808
    mem = layout_memory(step, hw, 128)
    assert mem["peak_stage"] == 1
    assert mem["static_GB"] == pytest.approx(19.425_070_080)
    assert mem["activations_GB"]["normal"] == pytest.approx(68.451_041_280)
    assert mem["peak_GB"]["normal"] == pytest.approx(87.876_111_360)
    assert mem["fits"] == {"normal": False}
    # with the whole state sharded (FSDP / ZeRO-3) the static part shrinks to 18 / 128 bytes a parameter
    full = layout_memory(step, AttrDict(hw, shard="full"), 128)
    assert full["stage_peak_GB"][1] == pytest.approx((3_187_703_808 * 18 / 128 + 68_451_041_280) / 1e9)
    # Bamboo: stage 1 also holds stage 2's weights and optimizer state (8 layers: 3,187,703,808 per
    # GPU x (2 + 12 / 128) bytes = 6,674,254,848), no gradients: 94.55 GB
    bamboo = layout_memory(step, hw, 128, shadow_next_stage=True)
    assert bamboo["peak_stage"] == 1 and bamboo["shadow_GB"] == pytest.approx(6.674_254_848)
    assert bamboo["peak_GB"]["normal"] == pytest.approx(87.876_111_360 + 6.674_254_848)
    # the last stage holds the first's (7 layers and the embedding)
    assert bamboo["stage_peak_GB"][15] - mem["stage_peak_GB"][15] == pytest.approx(3_051_909_120 * 2.09375 / 1e9)


def test_405b_preset_parts_counted_on_the_meta_device():
    """The preset's shape, counted: per layer and the embedding and head as worked out by hand above."""
    from omegaconf import OmegaConf

    from mecefo_exp.numerics.model import build_model

    cfg = compose_cfg(["model=llama_405b"]).model

    sizes = []
    for n in (1, 2):
        model = build_model(OmegaConf.merge(cfg, {"num_hidden_layers": n}), cfg.vocab_size, 0, device="meta")
        sizes.append(sum(p.numel() for p in model.parameters()))
    assert sizes[1] - sizes[0] == 3_187_703_808
    assert sizes[0] - 3_187_703_808 == 2 * 128_256 * 16_384 + 16_384  # embedding, head, final norm
    assert sizes[0] + 125 * 3_187_703_808 == 405_853_388_800  # 405B


def test_a_layer_times_the_layers_plus_the_rest_is_the_whole_model():
    """Counting one and two layers and scaling gives the whole model's FLOPs and saved bytes exactly
    (grouped-query attention included: 4 heads, 2 KV heads)."""
    from omegaconf import OmegaConf

    from mecefo_exp.plan import Mode
    from mecefo_exp.timing import build_model_on_meta
    from mecefo_exp.timing.flops import count_kernels
    from mecefo_exp.timing.kernels import FORWARD, KernelBench, micro_batch_kernel

    base = OmegaConf.merge(compose_cfg(["model=llama_tiny"]).model, {"num_key_value_heads": 2})
    modes = {"normal": Mode("normal")}
    counts, params = {}, {}
    for n in (1, 2, 4):
        model = build_model_on_meta(OmegaConf.merge(base, {"num_hidden_layers": n}), 512, 0, torch.bfloat16)
        bench = KernelBench(model, modes, torch.device("meta"), 2, 64)
        counts[n] = count_kernels(
            {"mb:normal": micro_batch_kernel(bench, modes["normal"]), "mb:forward": micro_batch_kernel(bench, FORWARD)},
            model,
        )
        params[n] = sum(p.numel() for p in model.parameters())
    p = parts_from_counts(counts[1], counts[2], params[1], params[2], 512 * 128)
    assert 4 * p.layer_flops + p.rest_flops == counts[4]["mb:normal"]["flops"]
    assert 4 * p.layer_forward_flops + p.rest_forward_flops == counts[4]["mb:forward"]["flops"]
    assert 4 * p.layer_saved + p.rest_saved == counts[4]["mb:normal"]["saved_bytes"]
    assert 4 * p.layer_params + p.embed_params + p.head_params == params[4]
    # grouped-query attention keeps K and V at their own width: a layer saves less than with 4 KV heads
    mha = build_model_on_meta(
        OmegaConf.merge(base, {"num_hidden_layers": 1, "num_key_value_heads": 4}), 512, 0, torch.bfloat16
    )
    bench = KernelBench(mha, modes, torch.device("meta"), 2, 64)
    full = count_kernels({"mb:normal": micro_batch_kernel(bench, modes["normal"])}, mha)["mb:normal"]
    assert full["saved_bytes"] > counts[1]["mb:normal"]["saved_bytes"]
    assert full["flops"] > counts[1]["mb:normal"]["flops"]  # K and V projections are wider; attention the same


HYBRID = [
    "model=llama_60m",
    "hardware=h100_8",
    "cluster.n_workers=16",
    "parallel.tp=2",
    "parallel.pp=2",
    "parallel.microbatches=4",
    "trainer.numerics=false",
    "failure=none",
    "method=checkpoint",
]


@pytest.mark.parametrize(
    "override, needle",
    [
        ("parallel.tp=3", "parallel.tp=3 x pp=2 x dp=auto: tp x pp = 6 must divide cluster.n_workers=16"),
        ("parallel.dp=2", "tp x pp x dp = 8 must equal cluster.n_workers=16"),
        ("model=llama_tiny", None),  # valid layouts pass: 4 heads, 4 layers
        ("parallel.pp=8", None),  # 8 stages of one layer, dp=1
        ("parallel.split=llama3", None),  # 8 + 2 layers over 2 stages: 4 and 4
        (
            "failure=high",
            "failure.unit_gpus=1 with parallel.tp=2 x pp=2 x dp=auto: a failure takes out whole tensor-parallel groups",
        ),
        ("method=bamboo", None),  # its shadow is the previous stage
        ("parallel.pp=1", None),  # tp x dp only
        (
            "method=bamboo parallel.pp=1",
            "method=bamboo with parallel.tp=2 x pp=1 x dp=auto: Bamboo's shadow is the "
            "previous pipeline stage: needs parallel.pp >= 2",
        ),
        ("trainer.numerics=true", "trainer.numerics=false"),
        ("parallel.microbatches=0", "parallel.microbatches=0: must be >= 1"),
        ("parallel.schedule=gpipe", "parallel.schedule='gpipe': allowed: 1f1b"),
    ],
)
def test_layout_settings_are_refused_in_one_line(override, needle):
    cfg = compose_cfg(HYBRID + override.split())
    if needle is None:
        validate(cfg)
        return
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["model=llama_350m", "parallel.tp=16", "cluster.n_workers=32", "parallel.pp=1"], "must fit in a node"),
        (
            ["model=llama_20m", "parallel.tp=8", "cluster.n_workers=16", "parallel.pp=1"],
            "parallel.tp=8: must divide model.num_attention_heads=4",
        ),
        (["parallel.pp=3", "cluster.n_workers=12"], "parallel.pp=3: must divide model.num_hidden_layers=8"),
        (["parallel.tp=1", "parallel.pp=1"], "parallel.microbatches=4 with tp=pp=1"),
        (
            ["parallel.split=llama3", "parallel.pp=4"],
            "parallel.split=llama3 with parallel.pp=4: needs pp >= 2 dividing",
        ),
    ],
)
def test_layout_rules_between_settings(overrides, needle):
    cfg = compose_cfg(HYBRID + overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_hybrid_run_charges_the_layout_step(run_exp):
    """A numerics-free run of TP2 x PP2 x DP4: every step costs the layout's failure-free step, the
    global batch is dp x microbatches x micro_batch sequences, summary.json shows the layout."""
    summary, _ = run_exp(*HYBRID, "trainer.max_steps=3", "data.micro_batch=1", "data.seq_len=256", micro=False)
    layout = summary["clock"]["layout"]
    assert (layout["tp"], layout["pp"], layout["dp"], layout["stage_layers"]) == (2, 2, 4, [4, 4])
    assert layout["bubble_fraction"] == pytest.approx(1 / 5)
    assert summary["clock"]["failure_free_step_s"] == pytest.approx(layout["step_s"])
    assert summary["memory"]["layout"] == "tp2 x pp2 x dp4"
    assert summary["sim_time_s"] >= 3 * layout["step_s"]
    assert summary["tokens_processed"] == 3 * 4 * 4 * 1 * 256


def test_explicit_pure_data_parallelism_gives_the_golden_clock(run_exp):
    """parallel.tp=1 pp=1 with dp named explicitly is today's clock: the failure-free golden run's
    simulated times exactly (numerics off: the clock is the same step by step, docs/DESIGN.md)."""
    import json
    from pathlib import Path

    from conftest import MICRO, read_jsonl
    from conftest import compose_cfg as compose

    n = compose(MICRO).cluster.n_workers
    golden = read_jsonl(Path(__file__).parent / "golden" / "failure_free.jsonl")
    _, run_dir = run_exp(
        "method=checkpoint",
        "failure=none",
        "trainer.max_steps=12",
        "parallel.tp=1",
        "parallel.pp=1",
        f"parallel.dp={n}",
        "trainer.numerics=false",
        "trainer.event_driven=false",
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = {r["step"]: r["sim_time_s"] for r in rows if "sim_time_s" in r and "val_loss" not in r}
    assert len(golden) == 12
    assert [times[g["step"]] for g in golden] == [g["sim_time_s"] for g in golden]


# ------------------------------------------------------------------ the methods in a hybrid layout
def test_where_a_gpu_sits_and_its_neighbours_by_hand():
    """Megatron's rank order, tp innermost, then dp, then pp: TP2 x PP2 x DP4 (16 GPUs)."""
    from mecefo_exp.timing.layout import LayoutShape

    shape = LayoutShape(tp=2, pp=2, dp=4)
    # GPU 11 = tensor rank 1 of replica (11 // 2) % 4 = 1 on stage 11 // 8 = 1
    assert (shape.stage(11), shape.replica(11)) == (1, 1)
    # the same slot (stage 1, tensor rank 1) in replicas 2, 3, 0
    assert list(shape.same_slot_in_next_replicas(11)) == [13, 15, 9]
    assert [shape.stage(g) for g in range(16)] == [0] * 8 + [1] * 8
    # REFT's parity chains: each (stage, tensor rank) slot's GPUs, one per replica
    assert shape.replica_chains() == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]


def test_reft_parity_groups_in_a_layout_never_put_two_shards_of_a_group_on_one_server():
    """Groups of 2 along the chains: a server (GPUs 2g, 2g + 1 at tp = 2) holds at most one shard of a
    group, and a group's parity sits in another replica of the same chain, on another server."""
    from mecefo_exp.methods.parity import parity_layout
    from mecefo_exp.timing.layout import LayoutShape

    groups, holders = parity_layout(16, 2, LayoutShape(tp=2, pp=2, dp=4).replica_chains())
    assert groups == [[0, 2], [4, 6], [1, 3], [5, 7], [8, 10], [12, 14], [9, 11], [13, 15]]
    assert holders == [4, 0, 5, 1, 12, 8, 13, 9]
    for group, holder in zip(groups, holders):
        servers = [w // 2 for w in group]
        assert len(set(servers)) == len(servers) and holder // 2 not in servers
    assert parity_layout(8, 4) == parity_layout(8, 4, None)  # pure DP: consecutive workers, as before


def test_a_degraded_pipeline_by_hand():
    """m = 4, p = 2: 5 pipeline slots. Stages of 1.0 s and 1.2 s per micro-batch: failure-free the
    slowest is 1.2 s. A neighbour on stage 0 working 1.9x: 1.9 s paces the pipeline, 5 x (1.9 - 1.2)
    = 3.5 s more; on stage 1 (1.2 x 1.9 = 2.28 s): 5 x 1.08 = 5.4 s. The batch on 3/4 of the GPUs
    (share 4/3): 5 x (1.6 - 1.2) = 2 s."""
    from mecefo_exp.timing.layout import degraded_pipeline_s

    kernels = {"layout:slots": 5.0, "layout:stage0": 1.0, "layout:stage1": 1.2}
    assert degraded_pipeline_s(kernels, {}) == 0.0
    assert degraded_pipeline_s(kernels, {0: 1.9}) == pytest.approx(3.5)
    assert degraded_pipeline_s(kernels, {1: 1.9}) == pytest.approx(5.4)
    assert degraded_pipeline_s(kernels, {0: 1.1}) == 0.0  # 1.1 s still under the slowest stage's 1.2 s
    assert degraded_pipeline_s(kernels, {}, share=4 / 3) == pytest.approx(2.0)


# TP2 x PP2 x DP4 of llama_60m; a failure takes out a node of 2 GPUs (one tensor-parallel group)
FAILING = [o for o in HYBRID if not o.startswith(("failure=", "method="))] + [
    "hardware.gpus_per_node=2",
    "failure=high",
    "failure.unit_gpus=2",
    "hardware.paper_time=scaled",
    "trainer.max_steps=300",
    "data.micro_batch=1",
    "data.seq_len=256",
    "trainer.eval_every=0",
    "seed=3",
]


@pytest.mark.parametrize("method", list(REGISTRY))
def test_every_method_runs_under_failures_in_a_hybrid_layout(run_exp, method):
    """Failures take out whole tensor-parallel groups; each method pays its own way, and the
    event-driven loop gives the step-by-step loop's run (the same check as for pure DP)."""
    from test_event_driven import assert_same_run

    stepped, stepped_dir = run_exp(*FAILING, f"method={method}", "trainer.event_driven=false", micro=False)
    driven, driven_dir = run_exp(*FAILING, f"method={method}", micro=False)
    assert stepped["status"] == "ok" and stepped["failures"] >= 4
    assert_same_run(stepped, driven, read_jsonl(stepped_dir / "events.jsonl"), read_jsonl(driven_dir / "events.jsonl"))
    layout = stepped["clock"]["layout"]
    step_s = layout["step_s"]
    breakdown = stepped["time_breakdown"]
    from mecefo_exp.methods import method_class
    from mecefo_exp.methods.rollback import RollbackMethod

    if issubclass(method_class(method), RollbackMethod):  # spares replace the group: steps stay failure-free
        assert breakdown["degraded_extra"] == 0 and stepped["rollbacks"] >= 1
    else:  # in place: the degraded steps are longer (MeCeFO falls back when a stage has no free neighbour)
        assert breakdown["degraded_extra"] > 0
        assert stepped["rollbacks"] == (0 if method == "oobleck" else stepped["fatal"])
    if method == "reft":  # some servers' losses are restored from memory (at high, many come two at a time)
        assert stepped["memory_restores"] >= 1
    if method == "baft":  # its checkpoint writes go into the layout's own bubble
        assert stepped["bubble_s"] == pytest.approx(layout["bubble_s"])
        assert stepped["bubble_fraction"] == pytest.approx(layout["bubble_s"] / step_s)
    if method == "bamboo":  # the shadow is the previous stage's slot of the same replica, same tensor rank
        pairs = [
            (e["worker"], e["detail"]["neighbor"])
            for e in read_jsonl(stepped_dir / "events.jsonl")
            if e["kind"] == "neighbor"
        ]
        assert pairs and all(nb == (failed - 8) % 16 for failed, nb in pairs)
    if method == "mecefo":
        events = read_jsonl(stepped_dir / "events.jsonl")
        from mecefo_exp.timing.layout import LayoutShape

        shape = LayoutShape(tp=2, pp=2, dp=4)
        pairs = [(e["worker"], e["detail"]["neighbor"]) for e in events if e["kind"] == "neighbor"]
        assert pairs
        for failed, nb in pairs:  # the same slot of another replica: same stage, same tensor rank
            assert shape.stage(nb) == shape.stage(failed) and nb % 2 == failed % 2
            assert shape.replica(nb) != shape.replica(failed)


def test_mecefo_degraded_step_in_a_layout_by_hand(run_exp, tmp_path):
    """One node (GPUs 2, 3: replica 1 of stage 0) fails in step 10: GPUs 4, 5 (replica 2) cover
    it and each of stage 0's pipeline slots runs pair / normal times longer, until it is back."""
    from mecefo_exp.timing.layout import degraded_pipeline_s

    trace = "time,worker,event\n" + "".join(
        f"{t},{w},{e}\n" for t, e in ((10.5, "fail"), (20.5, "recover")) for w in (2, 3)
    )
    path = tmp_path / "node.csv"
    path.write_text(trace)
    summary, run_dir = run_exp(
        *[o for o in FAILING if not o.startswith(("failure", "trainer.max_steps"))],
        "failure=trace",
        "failure.unit=steps",
        f"failure.path={path}",
        "method=mecefo",
        "trainer.max_steps=30",
        "hardware.storage_GBps=1e6",
        micro=False,
    )  # no long first checkpoint
    events = read_jsonl(run_dir / "events.jsonl")
    assert sorted((e["worker"], e["detail"]["neighbor"]) for e in events if e["kind"] == "neighbor") == [(2, 4), (3, 5)]
    profile = __import__("json").loads((run_dir / "profile.json").read_text())["kernels"]
    pair = next(v for k, v in profile.items() if k.startswith("neighbor_pair"))
    extra = degraded_pipeline_s(profile, {0: pair / profile["mb:normal"]})
    assert extra > 0
    degraded_steps = summary["degraded_steps"]
    step_of = {e["kind"]: e["step"] for e in events}
    assert degraded_steps == step_of["recover"] - step_of["fail"] >= 5  # longer steps: the recovery lands earlier
    assert summary["time_breakdown"]["degraded_extra"] == pytest.approx(degraded_steps * extra, rel=1e-12)


def test_mecefo_approximations_limited_to_one_stage_leave_the_later_stage_exact():
    """A tiny LLaMA of 4 layers in 2 stages; the approximations on stage 0's layers only: the
    gradients of stage 1 (its layers, the final norm and the head) are the exact ones, bit for bit
    (their backward starts at the loss and never passes through stage 0); stage 0's differ."""
    from omegaconf import OmegaConf

    from mecefo_exp.numerics.approx import LowRankProjections, approximations
    from mecefo_exp.numerics.model import build_model

    torch.manual_seed(0)
    from conftest import MICRO

    cfg = OmegaConf.merge(compose_cfg(MICRO).model, {"num_hidden_layers": 4})
    model = build_model(cfg, 97, seed=0)
    ids = torch.randint(0, 97, (2, 17))

    def grads(**approx):
        model.zero_grad(set_to_none=True)
        if approx:
            with approximations(model, **approx):
                model(input_ids=ids[:, :-1], labels=ids[:, 1:]).loss.backward()
        else:
            model(input_ids=ids[:, :-1], labels=ids[:, 1:]).loss.backward()
        return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}

    exact = grads()
    projections = LowRankProjections(model, 8, 10)
    projections.refresh(0)
    approx = grads(skip_attention=True, recompute_ffn=True, projections=projections, layers=[0, 1])
    later = [n for n in exact if n.startswith(("model.layers.2.", "model.layers.3.", "model.norm", "lm_head"))]
    earlier = [n for n in exact if n.startswith(("model.layers.0.", "model.layers.1."))]
    assert later and earlier
    for n in later:
        assert torch.equal(approx[n], exact[n]), n
    assert all(approx[n] is None for n in earlier if ".self_attn." in n)  # attention skipped in backward
    assert any(approx[n] is not None and not torch.equal(approx[n], exact[n]) for n in earlier if ".mlp." in n)


def test_a_trace_that_splits_a_tensor_parallel_group_is_refused(run_exp, tmp_path):
    from mecefo_exp.failures import TraceError

    path = tmp_path / "half.csv"
    path.write_text("time,worker,event\n3.5,2,fail\n")  # GPU 2 without GPU 3, its tensor-parallel partner
    with pytest.raises(TraceError, match=r"takes workers \[2\]: with parallel.tp=2 a failure takes out whole"):
        run_exp(
            *[o for o in FAILING if not o.startswith(("failure", "trainer.max_steps"))],
            "failure=trace",
            "failure.unit=steps",
            f"failure.path={path}",
            "method=mecefo",
            "trainer.max_steps=5",
            micro=False,
        )


def test_the_llama3_405b_experiment_lands_in_the_reported_mfu_band(run_exp):
    """experiment=llama3_405b: TP8 x PP16 x DP128 of 16,384 H100, 16M tokens per step; its calibrated
    efficiency puts the failure-free step in Llama 3's reported BF16 MFU band (38-43%), and its
    step count is 54 days of failure-free steps."""
    summary, _ = run_exp(
        "experiment=llama3_405b", "method=checkpoint", "failure=none", "trainer.max_steps=2", micro=False
    )
    clock = summary["clock"]
    layout = clock["layout"]
    assert (layout["tp"], layout["pp"], layout["dp"]) == (8, 16, 128)
    assert layout["stage_layers"] == [7] + [8] * 14 + [7]
    assert summary["tokens_committed"] == 2 * 128 * 16 * 8192  # 16,777,216 tokens per step
    assert 0.38 <= clock["implied_mfu"] <= 0.43, clock["implied_mfu"]
    from conftest import compose_cfg as compose

    steps = compose(["experiment=llama3_405b"]).trainer.max_steps
    assert steps * clock["failure_free_step_s"] == pytest.approx(54 * 86400, rel=1e-3)


def test_a_hybrid_run_reports_the_neighbour_flop_ratio_of_one_micro_batch(run_exp):
    """clock.flop_ratio_neighbour_normal is the neighbour pair's FLOPs over one normal micro-batch's,
    in a hybrid layout too (not over a GPU's share of a step: that read 13.3 at 405B)."""
    summary, run_dir = run_exp(
        *HYBRID[:-1], "method=mecefo", "trainer.max_steps=1", "data.micro_batch=1", "data.seq_len=256", micro=False
    )
    flops = __import__("json").loads((run_dir / "profile.json").read_text())["meta"]["flops"]
    pair = next(v for k, v in flops.items() if k.startswith("neighbor_pair"))
    assert summary["clock"]["flop_ratio_neighbour_normal"] == pytest.approx(pair / flops["mb:normal"])
    assert 1.2 < summary["clock"]["flop_ratio_neighbour_normal"] < 2.0


def test_reft_restores_a_lost_server_from_memory_in_a_layout(run_exp, tmp_path):
    """One server (GPUs 2 and 3: tensor ranks 0 and 1 of replica 1, stage 0) fails in step 10: its two
    shards belong to two parity groups (chains [0, 2, 4, 6] and [1, 3, 5, 7]), one erasure each, so
    REFT rebuilds both and restarts once from memory. With groups of consecutive GPUs both shards
    fall in group [0, 1, 2, 3]: two erasures, a fatal fall-back to disk."""
    path = tmp_path / "server.csv"
    path.write_text("time,worker,event\n10.5,2,fail\n10.5,3,fail\n20.5,2,recover\n20.5,3,recover\n")
    summary, run_dir = run_exp(
        *[o for o in FAILING if not o.startswith(("failure", "trainer.max_steps"))],
        "failure=trace",
        "failure.unit=steps",
        f"failure.path={path}",
        "method=reft",
        "trainer.max_steps=30",
        "hardware.storage_GBps=1e6",
        micro=False,
    )
    assert (summary["memory_restores"], summary["fatal"], summary["shards_rebuilt"]) == (1, 0, 2)
    restarts = [e for e in read_jsonl(run_dir / "events.jsonl") if e["kind"] == "restart"]
    assert len(restarts) == 1 and restarts[0]["detail"]["source"] == "memory"


def test_bamboo_redundant_forward_and_shadow_by_hand():
    """m = 4, p = 2, stages of 1.0 s and 1.2 s per micro-batch (forwards 0.4 s and 0.5 s): the
    pipeline is 5 x 1.2 = 6 s. Stage 0 idles 6 - 4 x 1.0 = 2 s and runs stage 1's forward 4 x 0.5 =
    2 s: it fits. Stage 1 idles 6 - 4.8 = 1.2 s for stage 0's 4 x 0.4 = 1.6 s: 0.4 s more. A slot of
    stage 0 that also does stage 1's work runs (1.0 + 1.2) / 1.0 = 2.2x; of stage 1, 2.2 / 1.2."""
    from mecefo_exp.timing.layout import redundant_forward_s, shadow_factor

    kernels = {
        "layout:slots": 5.0,
        "layout:stage0": 1.0,
        "layout:stage1": 1.2,
        "layout:forward0": 0.4,
        "layout:forward1": 0.5,
    }
    assert redundant_forward_s(kernels) == pytest.approx(0.4)
    assert redundant_forward_s({**kernels, "layout:forward0": 0.3}) == 0.0  # 1.2 s fits in 1.2 s
    assert shadow_factor(kernels, 0) == pytest.approx(2.2)
    assert shadow_factor(kernels, 1) == pytest.approx(2.2 / 1.2)


def _node_trace(tmp_path, rows):
    path = tmp_path / "nodes.csv"
    path.write_text("time,worker,event\n" + "".join(f"{t},{w},{e}\n" for t, w, e in rows))
    return path


NODE_RUN = [o for o in FAILING if not o.startswith(("failure", "trainer.max_steps"))] + [
    "failure=trace",
    "failure.unit=steps",
    "trainer.max_steps=30",
    "hardware.storage_GBps=1e6",
]


def test_bamboo_in_a_layout_by_hand(run_exp, tmp_path):
    """One node (GPUs 2, 3: replica 1 of stage 0) fails in step 10: its shadows are GPUs 10, 11,
    replica 1 of the previous stage (stage 1, wrapping around), whose slots do both stages' work
    until the node is back at step 20; the rejoin is one re-formation (one stall for the two GPUs).
    Every step pays the redundant forward that does not fit in the bubble."""
    from mecefo_exp.timing.layout import degraded_pipeline_s, redundant_forward_s, shadow_factor

    path = _node_trace(tmp_path, [(10.5, w, "fail") for w in (2, 3)] + [(20.5, w, "recover") for w in (2, 3)])
    summary, run_dir = run_exp(*NODE_RUN, f"failure.path={path}", "method=bamboo", micro=False)
    events = read_jsonl(run_dir / "events.jsonl")
    assert sorted((e["worker"], e["detail"]["neighbor"]) for e in events if e["kind"] == "neighbor") == [
        (2, 10),
        (3, 11),
    ]
    kernels = __import__("json").loads((run_dir / "profile.json").read_text())["kernels"]
    extra = degraded_pipeline_s(kernels, {1: shadow_factor(kernels, 1)})
    assert extra > 0
    breakdown = summary["time_breakdown"]
    assert summary["degraded_steps"] >= 5 and summary["rebalances"] == 1 and summary["fatal"] == 0
    # the step the failure interrupts keeps what it did before (`interrupted`): its remaining part
    # is charged less than a whole degraded step
    assert (summary["degraded_steps"] - 1) * extra < breakdown["degraded_extra"] <= summary["degraded_steps"] * extra
    writes = sum(e["detail"]["cost_s"] for e in events if e["kind"] == "checkpoint")  # its fallback checkpoints
    assert breakdown["ft_overhead"] == pytest.approx(30 * redundant_forward_s(kernels) + writes, rel=1e-9)
    assert redundant_forward_s(kernels) > 0  # m = 4 micro-batches leave too little bubble here
    assert summary["redundant_forward_s"] == redundant_forward_s(kernels)
    rebalance = [e for e in events if e["kind"] == "rebalance"]
    assert len(rebalance) == 1 and rebalance[0]["detail"]["workers"] == [2, 3]


def test_bamboo_in_a_layout_fails_on_a_node_and_its_shadow(run_exp, tmp_path):
    """GPUs 2, 3 fail at step 10 (covered by 10, 11); their shadows fail at step 12 while covering:
    the stage is lost, a fatal restart from the checkpoint. A failure of another replica's node
    (GPUs 4, 5 at step 11) is covered by its own shadow and is not fatal."""
    path = _node_trace(
        tmp_path,
        [
            (10.5, 2, "fail"),
            (10.5, 3, "fail"),
            (11.5, 4, "fail"),
            (11.5, 5, "fail"),
            (12.5, 10, "fail"),
            (12.5, 11, "fail"),
        ],
    )
    summary, run_dir = run_exp(*NODE_RUN, f"failure.path={path}", "method=bamboo", micro=False)
    fatal = [e for e in read_jsonl(run_dir / "events.jsonl") if e["kind"] == "fatal"]
    assert summary["neighbor_assignments"] == 4 and summary["fatal"] == 1
    assert fatal[0]["worker"] == 10 and fatal[0]["detail"]["reason"] == "adjacent failures"


def test_oobleck_reconfigures_once_for_a_whole_node(run_exp, tmp_path):
    """A node's two GPUs failing (and coming back) at one instant is one membership change: one
    reconfiguration stall each way, not one per GPU."""
    path = _node_trace(tmp_path, [(10.5, w, "fail") for w in (2, 3)] + [(20.5, w, "recover") for w in (2, 3)])
    summary, run_dir = run_exp(*NODE_RUN, f"failure.path={path}", "method=oobleck", micro=False)
    events = [e for e in read_jsonl(run_dir / "events.jsonl") if e["kind"] == "reconfigure"]
    assert summary["reconfigurations"] == 2
    assert [(e["detail"]["reason"], e["detail"]["workers"]) for e in events] == [
        ("failure", [2, 3]),
        ("recover", [2, 3]),
    ]
