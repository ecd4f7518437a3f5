"""What torchft does on this machine when a replica group is SIGKILLed and started again
(torchft's own membership, before it drives the harness's methods).

N replica groups of one process each (gloo, CPU) and a lighthouse on the loopback address.
Every step each replica starts a quorum, all-reduces its id + 1 with SUM (the reduction the
harness needs: sum + contributor count, not torchft's default average) and commits. One
replica is killed with SIGKILL mid-run and started again later; it heals from a live peer
(torchft's HTTP checkpoint transport, no disk). Printed: when the survivors' first step
without it ended and how long that step took (detection + new quorum), and how long the
restarted process took to rejoin (process start, heal, first step with everyone).

    python bench/torchft_probe.py                    # 3 replicas, kill replica 2 after 8 s, restart 4 s later
    python bench/torchft_probe.py --replicas 4 --kill-after 5 --restart-after 2

Needs torchft (optional: pip install -c constraints.txt torchft==0.2.0); without it, one line, exit 0.
"""

import argparse
import datetime
import os
import re
import signal
import socket
import subprocess
import sys
import time


def replica(rid: int, lighthouse: str, steps: int, pause: float) -> None:
    """One replica group: quorum, SUM all-reduce, commit, a line per step."""
    import torch
    from torch.distributed import ReduceOp, TCPStore
    from torchft import Manager, ProcessGroupGloo

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    state = {"w": torch.zeros(1)}
    manager = Manager(
        pg=ProcessGroupGloo(),
        min_replica_size=2,
        load_state_dict=lambda s: state.update(s),
        state_dict=lambda: dict(state),
        replica_id=f"r{rid}",
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=lighthouse,
        port=0,
        use_async_quorum=False,
        timeout=datetime.timedelta(seconds=10),
        quorum_timeout=datetime.timedelta(seconds=30),
    )
    for _ in range(steps):
        started = time.time()
        manager.start_quorum()
        g = torch.tensor([float(rid + 1)])
        manager.allreduce(g, reduce_op=ReduceOp.SUM).wait()
        if manager.should_commit():
            state["w"] += g
        print(
            f"STEP replica={rid} step={manager.current_step()} participants={manager.num_participants()} "
            f"sum={g.item():.0f} w={state['w'].item():.0f} start={started:.3f} end={time.time():.3f}",
            flush=True,
        )
        time.sleep(pause)
    manager.shutdown(wait=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def steps_of(path: str):
    rows = []
    for line in open(path):
        if line.startswith("STEP "):
            rows.append({k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--pause", type=float, default=0.2, help="seconds between steps (stands for compute)")
    ap.add_argument("--kill-after", type=float, default=8.0)
    ap.add_argument("--restart-after", type=float, default=4.0)
    ap.add_argument("--role", default="probe", help=argparse.SUPPRESS)
    ap.add_argument("--rid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lighthouse", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        import torchft  # noqa: F401
    except ImportError:
        print("torchft not installed: pip install -c constraints.txt torchft==0.2.0 (optional)")
        return 0
    if args.role == "replica":
        replica(args.rid, args.lighthouse, args.steps, args.pause)
        return 0
    import tempfile

    me, port = os.path.abspath(__file__), free_port()
    address = f"http://127.0.0.1:{port}"
    logs = tempfile.mkdtemp(prefix="torchft_probe_")
    procs = []

    def start(role, *extra, log):
        p = subprocess.Popen(
            [sys.executable, me, "--role", role, *extra], stdout=open(log, "w"), stderr=subprocess.STDOUT
        )
        procs.append(p)
        return p

    # torchft's lighthouse parses the process's own command line (it is the `torchft_lighthouse`
    # console script): run it from a two-line file so that its arguments are the only ones
    with open(f"{logs}/lighthouse.py", "w") as f:
        f.write("from torchft._torchft import lighthouse_main\nlighthouse_main()\n")
    try:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    f"{logs}/lighthouse.py",
                    "--bind",
                    f"127.0.0.1:{port}",
                    "--min_replicas",
                    "2",
                    "--join_timeout_ms",
                    "500",
                ],
                stdout=open(f"{logs}/lighthouse.log", "w"),
                stderr=subprocess.STDOUT,
            )
        )
        time.sleep(1.5)
        replicas = {
            rid: start(
                "replica",
                "--rid",
                str(rid),
                "--lighthouse",
                address,
                "--steps",
                str(args.steps),
                "--pause",
                str(args.pause),
                log=f"{logs}/r{rid}.log",
            )
            for rid in range(args.replicas)
        }
        victim = args.replicas - 1
        time.sleep(args.kill_after)
        killed_at = time.time()
        replicas[victim].send_signal(signal.SIGKILL)
        time.sleep(args.restart_after)
        restarted_at = time.time()
        start(
            "replica",
            "--rid",
            str(victim),
            "--lighthouse",
            address,
            "--steps",
            "20",
            "--pause",
            str(args.pause),
            log=f"{logs}/r{victim}_again.log",
        )
        replicas[0].wait(timeout=args.steps * (args.pause + 1.0) + 60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()

    survivor = steps_of(f"{logs}/r0.log")
    again = steps_of(f"{logs}/r{victim}_again.log")
    first_without = next((r for r in survivor if r["end"] > killed_at and r["participants"] < args.replicas), None)
    first_with = next((r for r in survivor if r["start"] > restarted_at and r["participants"] == args.replicas), None)
    print(
        f"# torchft probe: {args.replicas} replica groups (gloo, CPU), SUM all-reduce, replica {victim} SIGKILLed "
        f"{args.kill_after:.1f} s in, started again {args.restart_after:.1f} s later; logs in {logs}"
    )
    if first_without is None:
        print("survivors: no step without the killed replica was seen (it did not die, or they stopped)")
        return 1
    print(
        f"survivors: first step without it ended {first_without['end'] - killed_at:.2f} s after the kill and "
        f"took {first_without['end'] - first_without['start']:.2f} s (detection + new quorum); participants "
        f"{first_without['participants']:.0f}, SUM {first_without['sum']:.0f}; the job was not restarted"
    )
    if not again or first_with is None:
        print("restarted replica: did not rejoin within the run")
        return 1
    same = again[0]["w"] == next(r["w"] for r in survivor if r["step"] == again[0]["step"])
    print(
        f"restarted replica: first step with everyone ended {first_with['end'] - restarted_at:.2f} s after its "
        f"process started (interpreter, imports, quorum, heal from a live peer); its state after that step "
        f"{'equals' if same else 'DIFFERS from'} the survivors' (w = {again[0]['w']:.0f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
