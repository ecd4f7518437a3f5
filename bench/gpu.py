"""GPU benchmark: what the harness reaches on a GPU, against a plain loop.

For each model (default llama_130m and llama_350m) at one micro-batch, bf16:
  1. MFU of the harness's failure-free step (its own metrics rows: achieved TFLOP/s over the
     device's dense peak, mecefo_exp/timing/peaks.py), median after warm-up;
  2. harness tokens/s / plain hand-written loop tokens/s (same model, batch, AdamW, schedule,
     clipping and autocast; bench/overhead.py's loop), target >= 0.97;
  3. MeCeFO's neighbour pair against a normal micro-batch, its floor and the naive pair, in
     time and in torch.cuda.max_memory_allocated (bench/mecefo.py), target neighbour <= 1.1 x floor;
then 4. the torchrun tier on NCCL, one rank per visible GPU, a short failure-free run.
`--write-profile FILE` also measures the kernels the simulated clock uses on this device
(hardware=measured) and writes them with their meta (device, torch, dtype, shape): a CPU
user runs the clock on them with `cluster.profile=FILE`.

`--realistic`: the shapes the paper trains instead (sequence 256, LLaMA-130M / 350M / 1B, the
largest micro-batch of REALISTIC_MICRO_BATCH that fits, halved on out-of-memory): per model the
plain loop, the harness, the harness with `trainer.compile=true` and a nanoGPT-style compiled
loop (torch.compile'd model, fused AdamW), one after the other in one process, each with its MFU
(FLOPs of the harness's count over the median step) and the harness's ratios to its loop.
`--svd`: the seconds of MeCeFO's SVD refresh at the FFN shapes of 350M, 1B and 7B, full against
randomized (numerics/projections.py), as TFLOP/s of their formulas and as a share of the dense bf16 peak
(what hardware.svd_efficiency and rsvd_efficiency are).

Where no CUDA device is visible it prints one line and exits 0. `--device cpu` runs the
same code at whatever shape is given, to check the script itself (not a GPU number).

    python bench/gpu.py
    python bench/gpu.py --models llama_130m --micro-batch 32 --write-profile conf/profiles/h100_llama_130m.json
    python bench/gpu.py --device cpu --models llama_tiny --micro-batch 2 --seq-len 64 --steps 6 --warmup 2   # smoke test
    python bench/gpu.py --realistic --svd                                  # the paper's shapes, on a GPU
    python bench/gpu.py --realistic --svd --smoke --device cpu             # the same code on a CPU, tiny shapes
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

# the harness and the two CPU benches (bench/overhead.py, bench/mecefo.py) are imported inside
# the functions: without a device to measure, the script says so in a second or two


DATA = []  # data overrides for every run of the script (--data-sources)


def harness_overrides(model, micro_batch, seq_len, steps, precision, device, extra=(), n_workers=1):
    return [
        f"model={model}",
        "method=checkpoint",
        "failure=none",
        f"cluster.n_workers={n_workers}",
        f"cluster.device={device}",
        f"data.micro_batch={micro_batch}",
        f"data.seq_len={seq_len}",
        f"trainer.precision={precision}",
        f"trainer.max_steps={steps}",
        "trainer.eval_every=0",
        "trainer.progress=none",
        "data.eval_blocks=1",
        *DATA,
        *extra,
    ]


def harness_vs_plain(cfg, device, warmup, repeats, run_root: Path):
    """Median step seconds of the harness and of the plain loop, alternating; the harness's MFU."""
    from overhead import harness_step_times, plain_step_times

    harness, plain, mfus = [], [], []
    for r in range(repeats):
        run_dir = run_root / f"harness{r}"
        harness += harness_step_times(cfg, run_dir)[warmup:]
        rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
        mfus += [row["mfu"] for row in rows[warmup:] if row.get("mfu") is not None]
        plain += plain_step_times(cfg, cfg.trainer.max_steps, device)[warmup:]
    return statistics.median(harness), statistics.median(plain), (statistics.median(mfus) if mfus else None)


#: micro-batch (sequences of 256 tokens) tried first per model at --realistic, halved on out-of-memory:
#: 32k tokens for 130M and 350M, 16k for 1B (MosaicML's and nanoGPT's single-GPU runs of such
#: models use 32-65k tokens a micro-batch)
REALISTIC_MICRO_BATCH = {"llama_350m": 128, "llama_130m": 128, "llama_1b": 64}
#: FFN weight shapes (out x in) of each model's gate/up (down is the transpose) and rank, for --svd
SVD_SHAPES = {"llama_350m": (2736, 1024), "llama_1b": (5461, 2048), "llama_7b": (11008, 4096)}


def harness_run(cfg, run_dir: Path):
    """Per-step wall seconds of the harness's loop, and the FLOPs of one of its steps (its count)."""
    from mecefo_exp.run.experiment import Experiment

    exp = Experiment(cfg, run_dir)
    exp.setup()
    exp.train()
    exp.records.close()
    walls = [json.loads(line)["wall_time_s"] for line in open(run_dir / "metrics.jsonl")]
    flops = exp.training.kernel_counts["mb:normal"]["flops"] * cfg.cluster.n_workers
    del exp
    return [b - a for a, b in zip(walls, walls[1:])], flops


def compiled_loop_times(cfg, steps, device, compile_model=True):
    """nanoGPT-style: the model torch.compile'd, bf16 autocast, clipping, the loss read once a
    step; bench/overhead.py's loop (the same batches, schedule and optimizer) with its forward compiled."""
    from overhead import plain_step_times

    return plain_step_times(cfg, steps, device, compile_model=compile_model)


def free(device):
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def realistic(args, device, root: Path, peak) -> list:
    """Each model at its largest fitting micro-batch: plain, harness, harness compiled, compiled loop."""
    from overhead import compose_cfg, plain_step_times

    rows = []
    for model in args.models:
        mb = args.micro_batch if args.smoke else REALISTIC_MICRO_BATCH.get(model, args.micro_batch)
        while mb >= 1:
            cfg = compose_cfg(harness_overrides(model, mb, args.seq_len, args.steps, args.precision, device.type))
            try:
                plain = plain_step_times(cfg, args.steps, device)[args.warmup :]
                break
            except torch.OutOfMemoryError:
                print(f"{model}: micro-batch {mb} x {args.seq_len} does not fit; trying {mb // 2}")
                free(device)
                mb //= 2
        free(device)
        times = {"plain": statistics.median(plain)}
        h, flops = harness_run(cfg, root / f"{model}-harness")
        times["harness"] = statistics.median(h[args.warmup :])
        free(device)
        if not args.no_compile and (not args.compile_models or model in args.compile_models):
            ccfg = compose_cfg(
                harness_overrides(
                    model, mb, args.seq_len, args.steps, args.precision, device.type, extra=["trainer.compile=true"]
                )
            )
            hc, _ = harness_run(ccfg, root / f"{model}-harness-compiled")
            times["harness compiled"] = statistics.median(hc[args.warmup :])
            free(device)
            times["compiled loop"] = statistics.median(compiled_loop_times(cfg, args.steps, device)[args.warmup :])
            free(device)
        memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        tokens = mb * args.seq_len
        print(
            f"{model} at micro-batch {mb} x {args.seq_len} ({tokens} tokens, {flops / 1e12:.2f} TFLOP a step"
            f"{f', peak memory {memory:.1f} GiB' if memory else ''}):"
        )
        for name, t in times.items():
            mfu = flops / t / (peak * 1e12) if peak else None
            print(
                f"  {name:<17} {t * 1e3:9.1f} ms/step  {tokens / t:12.0f} tokens/s  "
                f"MFU {'n/a (no known peak)' if mfu is None else f'{mfu:.1%}'}"
            )
        ratio = times["plain"] / times["harness"]
        print(f"  harness / plain tokens/s {ratio:.3f} (target >= 0.97: {'met' if ratio >= 0.97 else 'MISSED'})")
        if "compiled loop" in times:
            print(
                f"  harness compiled / compiled loop tokens/s {times['compiled loop'] / times['harness compiled']:.3f}; "
                f"harness compiled / plain {times['plain'] / times['harness compiled']:.3f}"
            )
        rows.append({"model": model, "micro_batch": mb, "flops_per_step": flops, "seconds": times})
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    return rows


def svd_timings(args, device, peak) -> list:
    """Full vs randomized top-r right singular vectors of one FFN weight per shape, fp32."""
    import time

    from mecefo_exp.numerics.projections import full_svd_flops, randomized_svd_flops, top_right_singular_vectors

    shapes = {"tiny": (128, 64)} if args.smoke else SVD_SHAPES
    rows = []
    print(
        f"MeCeFO's SVD refresh, one FFN weight (fp32), rank {args.svd_rank}, randomized: oversampling 8, "
        f"2 power iterations; seconds median of {args.svd_repeats} after one warm-up"
    )
    for name, (m, n) in shapes.items():
        gen = torch.Generator(device=device).manual_seed(0)
        w = torch.randn(m, n, generator=gen, device=device) / n**0.5
        out = {}
        for kind, flops in (
            ("full", full_svd_flops(m, n)),
            ("randomized", randomized_svd_flops(m, n, args.svd_rank, 8, 2)),
        ):
            samples = []
            for r in range(1 + args.svd_repeats):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                top_right_singular_vectors(w, args.svd_rank, kind)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                if r:
                    samples.append(time.perf_counter() - t0)
            t = statistics.median(samples)
            out[kind] = {
                "seconds": t,
                "flops": flops,
                "tflops_s": flops / t / 1e12,
                "share_of_peak": flops / t / (peak * 1e12) if peak else None,
            }
            share = out[kind]["share_of_peak"]
            print(
                f"  {name} {m}x{n} {kind:<10}: {t * 1e3:9.2f} ms, {flops / 1e9:9.1f} GFLOP (formula), "
                f"{flops / t / 1e12:7.3f} TFLOP/s{'' if share is None else f', {share:.4%} of peak'}"
            )
        print(f"  {name}: randomized / full seconds {out['randomized']['seconds'] / out['full']['seconds']:.4f}")
        rows.append({"model": name, "shape": [m, n], **out})
        del w
        free(device)
    return rows


def torchrun_tier(args, n_gpus, run_root: Path) -> str:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        return "torchrun not found next to this python"
    cmd = [
        torchrun,
        f"--nproc-per-node={n_gpus}",
        "--standalone",
        str(ROOT / "run.py"),
        "cluster=torchrun",
        "cluster.backend=nccl",
        f"hydra.run.dir={run_root / 'torchrun'}",
        *harness_overrides(
            args.models[0], args.micro_batch, args.seq_len, args.steps, args.precision, "cuda", n_workers=n_gpus
        ),
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return f"FAILED (exit {out.returncode}): {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}"
    summary = json.loads((run_root / "torchrun" / "summary.json").read_text())
    return (
        f"{n_gpus} rank(s), NCCL: status {summary['status']}, {summary.get('achieved_tflops_s') or 0:.1f} TFLOP/s "
        f"per rank, MFU {summary.get('mfu')}"
    )


def write_profile(args, device, path: Path, run_root: Path, extra=()) -> None:
    from overhead import compose_cfg

    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(
        harness_overrides(
            args.models[0],
            args.micro_batch,
            args.seq_len,
            2,
            args.precision,
            device.type,
            extra=["hardware=measured", "cluster.profile=fresh", "method=mecefo", *extra],
        )
    )
    Experiment(cfg, run_root / "profile").run()
    profile = json.loads((run_root / "profile" / "profile.json").read_text())
    profile.setdefault("meta", {}).update(
        precision=args.precision, micro_batch=args.micro_batch, seq_len=args.seq_len, model=args.models[0]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, indent=1, sort_keys=True) + "\n")
    print(
        f"profile of {args.models[0]} on {profile['meta'].get('device_name')} -> {path} "
        f"(use it with cluster.profile={path})"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama_130m", "llama_350m"])
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rank", type=int, default=128, help="MeCeFO's method.rank for the neighbour bench")
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--write-profile", type=Path, default=None)
    ap.add_argument(
        "--realistic", action="store_true", help="the paper's shapes (see above) instead of the default bench"
    )
    ap.add_argument("--svd", action="store_true", help="time MeCeFO's SVD refresh, full vs randomized")
    ap.add_argument("--smoke", action="store_true", help="with --realistic/--svd: tiny shapes, to check the code")
    ap.add_argument("--no-compile", action="store_true", help="with --realistic: skip the compiled variants")
    ap.add_argument(
        "--compile-models",
        nargs="*",
        default=None,
        help="with --realistic: the models whose compiled variants run (default: every model)",
    )
    ap.add_argument(
        "--profile-only",
        action="store_true",
        help="with --write-profile: only measure the clock's kernels (hardware=measured) and write them",
    )
    ap.add_argument("--svd-rank", type=int, default=64)
    ap.add_argument("--svd-repeats", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="with --realistic/--svd: write the numbers here")
    ap.add_argument(
        "--data-sources",
        default=None,
        help="e.g. '[pydoc_topics,stdlib_docstrings,lee_background]': the small corpus (default: the default one)",
    )
    args = ap.parse_args()
    if not 0 <= args.warmup < args.steps:
        ap.error(
            f"--warmup={args.warmup} must be at least 0 and below --steps={args.steps}: the first --warmup "
            "steps of each run are dropped before the median"
        )
    if args.data_sources:
        DATA.append(f"data.sources={args.data_sources}")

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "no CUDA: bench/gpu.py measures a GPU; none is visible here (run it on a GPU machine, "
            "or with --device cpu to check the script)"
        )
        return 0
    device = torch.device(args.device)
    if args.profile_only:
        if not args.write_profile:
            ap.error("--profile-only needs --write-profile FILE")
        with tempfile.TemporaryDirectory() as tmp:
            write_profile(
                args,
                device,
                args.write_profile,
                Path(tmp),
                extra=["cluster.profile_warmup=1", "cluster.profile_repeats=3"],
            )
        return 0
    if args.realistic or args.svd:
        return realistic_main(args, device)
    from mecefo import neighbour_bench, print_neighbour_table
    from overhead import compose_cfg

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (script check, not a GPU number)"
    print(
        f"# bench/gpu.py on {name}, torch {torch.__version__}, {args.precision}, micro-batch "
        f"{args.micro_batch} x {args.seq_len}, {args.steps} steps (first {args.warmup} dropped) x {args.repeats}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for model in args.models:
            cfg = compose_cfg(
                harness_overrides(model, args.micro_batch, args.seq_len, args.steps, args.precision, device.type)
            )
            h, p, mfu = harness_vs_plain(cfg, device, args.warmup, args.repeats, root / model)
            ratio = p / h
            print(
                f"{model}: harness {h:.4f} s/step, plain {p:.4f} s/step, harness/plain tokens/s {ratio:.3f} "
                f"(target >= 0.97: {'met' if ratio >= 0.97 else 'MISSED'}), failure-free MFU "
                f"{'n/a (no known peak)' if mfu is None else f'{mfu:.1%}'}"
            )
            med, mem = neighbour_bench(
                model,
                args.seq_len,
                args.micro_batch,
                args.rank,
                max(3, args.repeats),
                1,
                device,
                args.precision,
                overrides=DATA,
            )
            print_neighbour_table(med, mem)
        if device.type == "cuda":
            print("torchrun tier:", torchrun_tier(args, torch.cuda.device_count(), root))
        if args.write_profile:
            write_profile(args, device, args.write_profile, root)
    return 0


def realistic_main(args, device) -> int:
    from mecefo_exp.timing.peaks import device_peak_tflops

    peak = device_peak_tflops(device, args.precision)
    if args.realistic and not args.smoke and args.models == ["llama_130m", "llama_350m"]:
        args.models = list(REALISTIC_MICRO_BATCH)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (script check, not a GPU number)"
    print(
        f"# bench/gpu.py on {name}, torch {torch.__version__}, {args.precision}, sequence {args.seq_len}, "
        f"{args.steps} steps (first {args.warmup} dropped), dense peak {peak} TFLOP/s"
    )
    out = {"device": name, "torch": torch.__version__, "peak_tflops": peak}
    if args.svd:
        out["svd"] = svd_timings(args, device, peak)
    if args.realistic:
        with tempfile.TemporaryDirectory() as tmp:
            out["realistic"] = realistic(args, device, Path(tmp), peak)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
