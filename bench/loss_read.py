"""When a step reads its losses: the harness as it is (after the optimizer step) against the
harness made to read each micro-batch's loss before clipping and AdamW (a wait for the device
mid-step, which the executor once had) and the plain loop (bench/overhead.py), alternating in
one process on one device; median step seconds after 10 warm-up steps.

    python bench/loss_read.py --model llama_130m --repeats 2          # on a GPU
    python bench/loss_read.py --model llama_tiny --repeats 1          # CPU: a check of the script
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import torch  # noqa: E402
from gpu import harness_overrides  # noqa: E402
from overhead import compose_cfg, harness_step_times, plain_step_times  # noqa: E402

import mecefo_exp.numerics.executor as executor  # noqa: E402

WARMUP, STEPS = 10, 30


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama_130m")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    kind = "cuda" if torch.cuda.is_available() else "cpu"
    micro_batch, seq_len = (16, 256) if kind == "cuda" else (2, 64)
    cfg = compose_cfg(harness_overrides(args.model, micro_batch, seq_len, STEPS, "bf16", kind))
    as_is = executor.LocalCluster.run_mode

    def reading_early(self, samples, mode):  # float() of each loss waits for the device before the optimizer
        return [float(loss) for loss in as_is(self, samples, mode)]

    times = {"as is": [], "read early": [], "plain": []}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            times["as is"] += harness_step_times(cfg, Path(tmp) / f"as_is{r}")[WARMUP:]
            executor.LocalCluster.run_mode = reading_early
            try:
                times["read early"] += harness_step_times(cfg, Path(tmp) / f"early{r}")[WARMUP:]
            finally:
                executor.LocalCluster.run_mode = as_is
            times["plain"] += plain_step_times(cfg, STEPS, torch.device(kind))[WARMUP:]
            m = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"{args.model} on {kind}, after {r + 1} repeat(s) ({time.time() - started:.0f} s): as is "
                f"{m['as is'] * 1e3:.1f} ms, read early {m['read early'] * 1e3:.1f} ms, plain "
                f"{m['plain'] * 1e3:.1f} ms a step; plain/as is {m['plain'] / m['as is']:.3f}, "
                f"plain/read early {m['plain'] / m['read early']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
