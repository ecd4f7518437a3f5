"""Harness overhead: tokens/s of the harness's failure-free step vs a plain PyTorch loop.

Both train the same LLaMA on the same micro-batches of the same sample stream with the
same AdamW, schedule and clipping, in this process, alternating (harness, plain, harness,
plain, ...) so that machine noise hits both. Reported: the median step time of each after
warm-up steps, and the ratio harness tokens/s / plain tokens/s (target >= 0.97).

    python bench/overhead.py                     # 1 worker and 8 workers, llama_tiny
    python bench/overhead.py --workers 1 4 --steps 20 --repeats 3
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mecefo_exp import api  # noqa: E402
from mecefo_exp.data import SampleStream, load_corpus  # noqa: E402
from mecefo_exp.numerics.model import build_model  # noqa: E402
from mecefo_exp.numerics.optim import make_optimizer, make_scheduler  # noqa: E402
from mecefo_exp.run.experiment import Experiment  # noqa: E402


def compose_cfg(overrides):
    return api.compose(overrides)


def harness_step_times(cfg, run_dir):
    """Per-step wall seconds of the harness's own loop (from its metrics rows)."""
    exp = Experiment(cfg, run_dir)
    exp.setup()
    exp.train()
    exp.records.close()
    import json

    walls = [json.loads(line)["wall_time_s"] for line in open(Path(run_dir) / "metrics.jsonl")]
    return [b - a for a, b in zip(walls, walls[1:])]


def plain_step_times(cfg, steps, device=torch.device("cpu"), compile_model=False):  # noqa: B008 (an immutable value)
    """nanoGPT-style: build the batch, forward, mean loss, backward, clip, step (with bf16
    autocast when cfg.trainer.precision says so, as the harness does); `compile_model`: the
    forward through torch.compile."""
    corpus = load_corpus(cfg.data)
    n = cfg.cluster.n_workers
    stream = SampleStream(corpus.train, cfg.data.seq_len, cfg.data.micro_batch, n, cfg.seed)
    model = build_model(cfg.model, corpus.vocab_size, cfg.seed).to(device)
    opt = make_optimizer(model, cfg.trainer)
    sched = make_scheduler(opt, cfg.trainer)
    forward = torch.compile(model) if compile_model else model
    bf16 = cfg.trainer.precision == "bf16"
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        batch = torch.cat([stream.micro_batch(step, w) for w in range(n)]).to(device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = forward(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.grad_clip)
        opt.step()
        sched.step()
        loss.item()  # waits for the device, as the harness's logging does
        times.append(time.perf_counter() - t0)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama_tiny")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"# harness vs plain PyTorch loop, model={args.model}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {args.steps} steps x {args.repeats} repeats (first {args.warmup} dropped)"
    )
    print(
        f"{'workers':>7} {'tokens/step':>11} {'harness s/step':>14} {'plain s/step':>12} {'harness tok/s':>13} "
        f"{'plain tok/s':>11} {'ratio':>6}"
    )
    for n in args.workers:
        cfg = compose_cfg(
            [
                f"model={args.model}",
                "method=checkpoint",
                "failure=none",
                f"cluster.n_workers={n}",
                f"trainer.max_steps={args.steps}",
                "trainer.eval_every=0",
                "trainer.progress=none",
                "data.eval_blocks=1",
            ]
        )
        tokens = n * cfg.data.micro_batch * cfg.data.seq_len
        harness, plain = [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                harness += harness_step_times(cfg, Path(tmp) / "run")[args.warmup :]
            plain += plain_step_times(cfg, args.steps)[args.warmup :]
        h, p = statistics.median(harness), statistics.median(plain)
        print(f"{n:>7} {tokens:>11} {h:>14.4f} {p:>12.4f} {tokens / h:>13.0f} {tokens / p:>11.0f} {p / h:>6.3f}")


if __name__ == "__main__":
    main()
