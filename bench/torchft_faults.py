"""Real detection and heal times of the harness on torchft, against the constants
the simulated clock charges (conf/cluster/local.yaml: detection_s 30, restart_s 76,
reconfigure_s 2).

Two runs of `run.py cluster=torchft` on this machine (gloo, one process per worker, a tiny
LLaMA): a failure-free reference, then the same run with a trace that SIGKILLs workers for
real (worker 0, which writes the record, among them) and brings them back. Printed: each
failure's detection (kill -> the survivors' quorum without it), each rejoin's cost (process
start -> Manager up -> quorum and heal from a live peer, bytes moved), and the faulty run's
wall time as a ratio of the reference's.

    python bench/torchft_faults.py                       # mecefo, 4 workers, 40 steps
    python bench/torchft_faults.py --method oobleck --heartbeat-ms 500

Needs torchft (optional: make test-torchft installs it); without it, one line, exit 0.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.hidden_size=64",
    "model.intermediate_size=172",
    "model.num_hidden_layers=2",
    "model.num_attention_heads=2",
    "data.seq_len=64",
    "data.micro_batch=2",
    "data.eval_blocks=8",
    "trainer.eval_every=0",
    "trainer.warmup_steps=2",
    "trainer.threads=1",
    "trainer.progress=none",
    "data.sources=[lee_background]",
]
# in steps: worker 0 (the record's writer) and worker 2 fail and come back
TRACE = "time,worker,event\n8.5,0,fail\n14.5,2,fail\n20.5,0,recover\n26.5,2,recover\n"


def run(run_dir: Path, *overrides) -> dict:
    cmd = [sys.executable, "run.py", "cluster=torchft", *TINY, *overrides, f"hydra.run.dir={run_dir}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", RUST_LOG="warn", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"run failed ({run_dir}):\n{out.stderr[-3000:]}")
    return json.loads((run_dir / "summary.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="mecefo")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--heartbeat-ms", type=int, default=1000, help="the lighthouse's heartbeat timeout")
    args = ap.parse_args()
    try:
        import torchft  # noqa: F401
    except ImportError:
        print("torchft not installed: pip install -c constraints.txt -r requirements-torchft.txt (optional)")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="torchft_faults_"))
    (tmp / "trace.csv").write_text(TRACE)
    common = [
        f"method={args.method}",
        f"cluster.n_workers={args.workers}",
        f"trainer.max_steps={args.steps}",
        f"cluster.heartbeat_timeout_ms={args.heartbeat_ms}",
    ]
    ref = run(tmp / "reference", *common, "failure=none")
    faulty = run(
        tmp / "faulty",
        *common,
        "failure=trace",
        "failure.unit=steps",
        f"failure.path={tmp / 'trace.csv'}",
        "failure.kill=true",
    )
    ft = faulty["torchft"]
    print(
        f"# torchft faults: method={args.method}, {args.workers} workers (gloo, CPU, one process each), "
        f"{args.steps} steps, lighthouse heartbeat timeout {args.heartbeat_ms} ms; runs in {tmp}"
    )
    for f in ft["failures"]:
        print(
            f"failure  worker {f['worker']} at step {f['step']}: detected {f['detection_s']:.2f} s after the "
            f"SIGKILL (the survivors' quorum took {f['quorum_s']:.2f} s), {f['survivors']} survivors went on"
        )
    for r in ft["recoveries"] + ft["spares"]:
        print(
            f"rejoin   worker {r['worker']} at step {r['step']}: process start -> Manager up "
            f"{r['process_start_to_ready_s']:.2f} s, quorum + heal {r['heal_s']:.3f} s, "
            f"{r['state_bytes'] / 1e6:.2f} MB from a live peer; restart asked -> in the quorum "
            f"{r['requested_to_rejoined_s']:.2f} s"
        )
    det = [f["detection_s"] for f in ft["failures"]]
    rejoin = [r["requested_to_rejoined_s"] for r in ft["recoveries"] + ft["spares"]]
    job_restarts = min(ft["processes_started"].values()) - 1  # a job restart starts every worker again
    print(
        f"mean detection {statistics.mean(det):.2f} s vs detection_s 30 (ratio {statistics.mean(det) / 30:.3f}); "
        f"mean restart -> rejoined {statistics.mean(rejoin):.2f} s vs restart_s 76 "
        f"(ratio {statistics.mean(rejoin) / 76:.3f}); job restarts: {job_restarts} "
        f"(processes per worker {ft['processes_started']})"
    )
    print(
        f"wall time: faulty {faulty['wall_time_s']:.1f} s vs failure-free {ref['wall_time_s']:.1f} s "
        f"(ratio {faulty['wall_time_s'] / ref['wall_time_s']:.2f}); final val loss {faulty['final_val_loss']:.4f} vs "
        f"{ref['final_val_loss']:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
