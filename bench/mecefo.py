"""The MeCeFO neighbour's step, side by side: time and saved-activation memory.

Variants, each measured in this process on the same model, micro-batches and threads,
round-robin over repeats (medians reported):
  normal         a normal worker: one micro-batch, exact forward+backward
  naive          neighbour-do-both without approximations: two micro-batches, exact
  neighbor       two micro-batches with all three techniques (what the harness charges)
  -skip_attn     neighbor with attention backward back on
  -recompute     neighbor without FFN recomputation
  -lowrank       neighbor with exact FFN weight gradients
  floor          two forwards plus the backward the neighbour cannot skip: LM head, FFN
                 recomputation and input gradients, no attention backward, no FFN weight
                 gradient at all (low-rank with r -> 0)
Memory: bytes autograd saves for backward (unique storages, parameters excluded) on
CPU; torch.cuda.max_memory_allocated minus the model's own memory on a GPU.

    python bench/mecefo.py                       # llama_60m shape, micro-batch 4 x 256, r=64
    python bench/mecefo.py --model llama_tiny --seq-len 128 --repeats 5
"""

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from mecefo_exp import api
from mecefo_exp.data import SampleStream, load_corpus
from mecefo_exp.numerics.approx import (
    LowRankProjections,
    approximations,
    is_attention_parameter,
    saved_activation_bytes,
)
from mecefo_exp.numerics.executor import LocalCluster
from mecefo_exp.numerics.model import build_model
from mecefo_exp.plan import NORMAL, Mode, Sample

PAIR = [Sample(0, 0), Sample(0, 1)]
ONE = [Sample(0, 0)]


def variants(model, projections):
    """name -> (samples, Mode). Modes reuse the harness's own approximations context."""

    def ctx(skip, recompute, lowrank, frozen_ffn=False):
        @contextlib.contextmanager
        def run(m):
            frozen = [p for n, p in m.named_parameters() if frozen_ffn and ".mlp." in n]
            for p in frozen:
                p.requires_grad_(False)
            try:
                with approximations(m, skip, recompute, projections if lowrank else None):
                    yield
            finally:
                for p in frozen:
                    p.requires_grad_(True)

        return run

    no_attn = lambda n: not is_attention_parameter(n)  # noqa: E731
    return {
        "normal": (ONE, NORMAL),
        "naive": (PAIR, NORMAL),
        "neighbor": (PAIR, Mode("neighbor", no_attn, ctx(True, True, True))),
        "-skip_attn": (PAIR, Mode("-skip_attn", lambda n: True, ctx(False, True, True))),
        "-recompute": (PAIR, Mode("-recompute", no_attn, ctx(True, False, True))),
        "-lowrank": (PAIR, Mode("-lowrank", no_attn, ctx(True, True, False))),
        "floor": (PAIR, Mode("floor", no_attn, ctx(True, True, False, frozen_ffn=True))),
    }


def measure(cluster, samples, mode, device):
    cluster.model.zero_grad(set_to_none=True)
    acct = {}
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    with saved_activation_bytes(cluster.model, acct) if device.type == "cpu" else contextlib.nullcontext():
        cluster.run_mode(samples, mode)
    if device.type == "cuda":
        torch.cuda.synchronize()
        acct["bytes"] = torch.cuda.max_memory_allocated() - base
    return time.perf_counter() - t0, acct["bytes"]


def neighbour_bench(model_name, seq_len, micro_batch, rank, repeats, warmup, device, precision="fp32", overrides=()):
    """Median seconds and memory of every variant (see the module doc), measured round-robin."""
    cfg = api.compose(
        [f"model={model_name}", f"data.seq_len={seq_len}", f"data.micro_batch={micro_batch}", *overrides], check=False
    )
    corpus = load_corpus(cfg.data)
    stream = SampleStream(corpus.train, seq_len, micro_batch, 2, seed=0)
    model = build_model(cfg.model, corpus.vocab_size, seed=0).to(device)
    projections = LowRankProjections(model, rank, every=10**9)
    projections.refresh(0)
    table = variants(model, projections)
    cluster = LocalCluster(model, stream, {}, device, precision=precision)

    times = {k: [] for k in table}
    mem = {}
    for r in range(warmup + repeats):
        for name, (samples, mode) in table.items():
            t, b = measure(cluster, samples, mode, device)
            if r >= warmup:
                times[name].append(t)
                mem[name] = b
    return {k: statistics.median(v) for k, v in times.items()}, mem


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama_60m")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = ap.parse_args()

    device = torch.device(args.device)
    med, mem = neighbour_bench(
        args.model, args.seq_len, args.micro_batch, args.rank, args.repeats, args.warmup, device, args.precision
    )
    print(
        f"# MeCeFO neighbour bench: model={args.model} micro-batch {args.micro_batch}x{args.seq_len} r={args.rank} "
        f"device={device.type} {args.precision} threads={torch.get_num_threads()} repeats={args.repeats}"
    )
    print_neighbour_table(med, mem)


def print_neighbour_table(med, mem):
    print(
        f"{'variant':<12} {'time s':>8} {'x normal':>9} {'x floor':>8} {'x naive':>8} {'act MiB':>8} {'mem x naive':>11}"
    )
    for name in med:
        print(
            f"{name:<12} {med[name]:>8.3f} {med[name] / med['normal']:>9.2f} {med[name] / med['floor']:>8.2f} "
            f"{med[name] / med['naive']:>8.2f} {mem[name] / 2**20:>8.1f} {mem[name] / mem['naive']:>11.2f}"
        )
    ok_time = med["neighbor"] <= 1.1 * med["floor"]
    ok_mem = mem["neighbor"] <= 0.65 * mem["naive"]
    print(f"target neighbor <= 1.10 x floor: {med['neighbor'] / med['floor']:.2f} -> {'met' if ok_time else 'MISSED'}")
    print(
        f"target neighbor memory <= 0.65 x naive: {mem['neighbor'] / mem['naive']:.2f} -> {'met' if ok_mem else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
