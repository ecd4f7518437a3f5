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

Where no CUDA device is visible it prints one line and exits 0. `--device cpu` runs the
same code at whatever shape is given, to check the script itself (not a GPU number).

    python bench/gpu.py
    python bench/gpu.py --models llama_130m --micro-batch 32 --write-profile conf/profiles/h100_llama_130m.json
    python bench/gpu.py --device cpu --models llama_tiny --micro-batch 2 --seq-len 64 --steps 6 --warmup 2   # smoke test
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
    return [f"model={model}", "method=checkpoint", "failure=none", f"cluster.n_workers={n_workers}",
            f"cluster.device={device}",
            f"data.micro_batch={micro_batch}", f"data.seq_len={seq_len}", f"trainer.precision={precision}",
            f"trainer.max_steps={steps}", "trainer.eval_every=0", "trainer.progress=none", "data.eval_blocks=1",
            *DATA, *extra]


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


def torchrun_tier(args, n_gpus, run_root: Path) -> str:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        return "torchrun not found next to this python"
    cmd = [torchrun, f"--nproc-per-node={n_gpus}", "--standalone", str(ROOT / "run.py"), "cluster=torchrun",
           "cluster.backend=nccl", f"hydra.run.dir={run_root / 'torchrun'}",
           *harness_overrides(args.models[0], args.micro_batch, args.seq_len, args.steps, args.precision, "cuda",
                              n_workers=n_gpus)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return f"FAILED (exit {out.returncode}): {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ''}"
    summary = json.loads((run_root / "torchrun" / "summary.json").read_text())
    return (f"{n_gpus} rank(s), NCCL: status {summary['status']}, {summary.get('achieved_tflops_s') or 0:.1f} TFLOP/s "
            f"per rank, MFU {summary.get('mfu')}")


def write_profile(args, device, path: Path, run_root: Path) -> None:
    from overhead import compose_cfg

    from mecefo_exp.trainer import Experiment

    cfg = compose_cfg(harness_overrides(args.models[0], args.micro_batch, args.seq_len, 2, args.precision,
                                        device.type, extra=["hardware=measured", "cluster.profile=fresh",
                                                            "method=mecefo"]))
    Experiment(cfg, run_root / "profile").run()
    profile = json.loads((run_root / "profile" / "profile.json").read_text())
    profile.setdefault("meta", {}).update(precision=args.precision, micro_batch=args.micro_batch,
                                          seq_len=args.seq_len, model=args.models[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, indent=1, sort_keys=True) + "\n")
    print(f"profile of {args.models[0]} on {profile['meta'].get('device_name')} -> {path} "
          f"(use it with cluster.profile={path})")


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
    ap.add_argument("--data-sources", default=None,
                    help="e.g. '[pydoc_topics,stdlib_docstrings,lee_background]': the small corpus (default: the default one)")
    args = ap.parse_args()
    if not 0 <= args.warmup < args.steps:
        ap.error(f"--warmup={args.warmup} must be at least 0 and below --steps={args.steps}: the first --warmup "
                 "steps of each run are dropped before the median")
    if args.data_sources:
        DATA.append(f"data.sources={args.data_sources}")

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA: bench/gpu.py measures a GPU; none is visible here (run it on a GPU machine, "
              "or with --device cpu to check the script)")
        return 0
    from mecefo import neighbour_bench, print_neighbour_table
    from overhead import compose_cfg

    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (script check, not a GPU number)"
    print(f"# bench/gpu.py on {name}, torch {torch.__version__}, {args.precision}, micro-batch "
          f"{args.micro_batch} x {args.seq_len}, {args.steps} steps (first {args.warmup} dropped) x {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for model in args.models:
            cfg = compose_cfg(harness_overrides(model, args.micro_batch, args.seq_len, args.steps, args.precision,
                                                device.type))
            h, p, mfu = harness_vs_plain(cfg, device, args.warmup, args.repeats, root / model)
            ratio = p / h
            print(f"{model}: harness {h:.4f} s/step, plain {p:.4f} s/step, harness/plain tokens/s {ratio:.3f} "
                  f"(target >= 0.97: {'met' if ratio >= 0.97 else 'MISSED'}), failure-free MFU "
                  f"{'n/a (no known peak)' if mfu is None else f'{mfu:.1%}'}")
            med, mem = neighbour_bench(model, args.seq_len, args.micro_batch, args.rank, max(3, args.repeats), 1,
                                       device, args.precision, overrides=DATA)
            print_neighbour_table(med, mem)
        if device.type == "cuda":
            print("torchrun tier:", torchrun_tier(args, torch.cuda.device_count(), root))
        if args.write_profile:
            write_profile(args, device, args.write_profile, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
