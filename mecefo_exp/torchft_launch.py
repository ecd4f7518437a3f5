"""`python run.py cluster=torchft ...`: the lighthouse, the worker processes, their restarts.

This process trains nothing. It starts torchft's lighthouse on 127.0.0.1 (unless
cluster.lighthouse names a running one), a small store the workers coordinate through, and
one process per worker (`python -m mecefo_exp.torchft_launch <run dir>`: `worker_main` below);
then it watches:

- a worker that SIGKILLed itself for the trace (it says so first in the store) is gone as
  planned; the survivors go on without it (cluster/torchft.py);
- when the survivors ask for worker w again (a trace recovery or a spare), its next process
  starts here and heals from a live peer: the job itself is never restarted;
- a worker SIGKILLed from outside is a real fault: the survivors go on without it and ask
  for its next process, which heals as after a trace recovery;
- a worker that exits with an error ends the run: every process is stopped, summary.json
  says failed and why.

Whatever happens, the workers and the lighthouse are gone when this returns (the workers
also die with this process: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, Optional

from .cluster.torchft import (ENV_INCARNATION, ENV_LIGHTHOUSE, ENV_STARTED, ENV_STORE, ENV_WORKER, LOOPBACK,
                              loopback_environment, loopback_store, require_torchft)
from .metrics import write_json_atomic
from .trainer import Experiment, Terminated, signals_end_the_run

log = logging.getLogger(__name__)

POLL_S = 0.05
STOP_GRACE_S = 10.0  # SIGTERM, then this long to write the record, then SIGKILL


class WorkerFailed(RuntimeError):
    pass


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the launcher dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Launcher:
    def __init__(self, cfg, run_dir: Path):
        self.cfg, self.run_dir, self.n = cfg, Path(run_dir), cfg.cluster.n_workers
        self.procs: Dict[int, subprocess.Popen] = {}
        self.incarnation: Dict[int, int] = {w: 0 for w in range(self.n)}
        self.lighthouse = None
        self.store = None
        self.lighthouse_address: Optional[str] = None
        self.started_lighthouse = False

    def start_services(self) -> None:
        c = self.cfg.cluster
        self.store = loopback_store(c.restart_timeout_s)
        self.store_address = f"{LOOPBACK}:{self.store.port}"
        self.lighthouse_address = c.lighthouse
        if self.lighthouse_address is None:
            from torchft._torchft import LighthouseServer

            # min_replicas 1: the survivors go on down to one worker; join_timeout: how long a
            # quorum waits for a live worker that is late; heartbeat_timeout: when a silent one is out
            self.lighthouse = LighthouseServer(bind=f"{LOOPBACK}:0", min_replicas=1, join_timeout_ms=c.join_timeout_ms,
                                               heartbeat_timeout_ms=c.heartbeat_timeout_ms)
            # its own address names this host, which may resolve to another interface than the one it listens on
            self.lighthouse_address = f"http://{LOOPBACK}:{self.lighthouse.address().rsplit(':', 1)[1]}"
            self.started_lighthouse = True
        log.info("torchft: lighthouse %s%s, %d workers, logs in %s", self.lighthouse_address,
                 " (started for this run)" if self.lighthouse else "", self.n, self.run_dir / "torchft")

    def start_worker(self, w: int, incarnation: int) -> None:
        env = {**loopback_environment(), **os.environ, ENV_WORKER: str(w), ENV_INCARNATION: str(incarnation),
               ENV_LIGHTHOUSE: self.lighthouse_address, ENV_STORE: self.store_address, ENV_STARTED: repr(time.time())}
        self.procs[w] = subprocess.Popen([sys.executable, "-m", "mecefo_exp.torchft_launch", str(self.run_dir)],
                                         env=env, preexec_fn=_die_with_parent)
        self.incarnation[w] = incarnation
        if incarnation:
            log.info("torchft: worker %d started again (process %d, incarnation %d)", w, self.procs[w].pid, incarnation)

    def watch(self) -> None:
        """Until every worker process has ended: planned deaths, restarts, real faults."""
        while self.procs:
            for w, p in list(self.procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del self.procs[w]
                planned = self.store.check([f"killed/{w}/{self.incarnation[w]}"])
                if rc == 0:
                    continue
                if rc == -signal.SIGKILL:
                    if not planned:
                        log.warning("torchft: worker %d was SIGKILLed from outside: a real fault, the others go on", w)
                    continue
                raise WorkerFailed(f"worker {w} exited with code {rc} (its log: {self.run_dir}/torchft/worker-{w}.log)")
            for w in range(self.n):
                if w in self.procs or not self.store.check([f"restart/{w}"]):
                    continue
                wanted = int(self.store.get(f"restart/{w}").decode())
                if wanted > self.incarnation[w]:
                    self.start_worker(w, wanted)
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Every worker gone, then the lighthouse; safe to call twice."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # a worker writes its record, then exits
        deadline = time.time() + STOP_GRACE_S
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        if self.lighthouse is not None:
            self.lighthouse.shutdown()
            self.lighthouse = None


def launch(cfg, run_dir: Path) -> dict:
    """Run `cfg` on torchft; returns the run's summary (status ok), or raises with it failed."""
    from omegaconf import OmegaConf

    # torchft's lighthouse and managers log every quorum at info (read once, at torchft's import)
    os.environ.setdefault("RUST_LOG", "warn")
    require_torchft()
    run_dir = Path(run_dir)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)  # what every worker process loads
    (run_dir / "torchft").mkdir(exist_ok=True)
    launcher = Launcher(cfg, run_dir)
    error: Optional[str] = None
    try:
        with signals_end_the_run():
            launcher.start_services()
            for w in range(launcher.n):
                launcher.start_worker(w, 0)
            launcher.watch()
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        launcher.stop()
        summary = _read_summary(run_dir)
        if error is None and summary.get("status") != "ok":
            error = "every worker process ended, but none wrote a finished record"
        if error is not None:
            summary.update(status="failed", error=f"torchft launcher: {error}")
        # what only the launcher knows: where the lighthouse was, how many processes each worker had
        summary.setdefault("torchft", {}).update(
            lighthouse=launcher.lighthouse_address, lighthouse_started_here=launcher.started_lighthouse,
            processes_started={str(w): n + 1 for w, n in launcher.incarnation.items()})
        write_json_atomic(run_dir / "summary.json", summary)
    if summary.get("status") != "ok":
        raise WorkerFailed(summary.get("error", "failed"))
    return summary


def _read_summary(run_dir: Path) -> dict:
    import json

    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {"run_dir": str(run_dir)}


def worker_main() -> int:
    """One worker process (`python -m mecefo_exp.torchft_launch <run dir>`, started by `launch`):
    the run's config from its folder, who it is from the environment."""
    from omegaconf import OmegaConf

    run_dir = Path(sys.argv[1])
    worker = int(os.environ[ENV_WORKER])
    cfg = OmegaConf.load(run_dir / "config.yaml")
    log_file = run_dir / "torchft" / f"worker-{worker}.log"
    fmt = f"[%(asctime)s][worker {worker}][%(name)s][%(levelname)s] - %(message)s"
    console = logging.StreamHandler()
    console.setLevel(logging.INFO if worker == 0 and os.environ.get(ENV_INCARNATION, "0") == "0" else logging.WARNING)
    file = logging.FileHandler(log_file)
    for h in (console, file):
        h.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(level=logging.INFO, handlers=[console, file])
    for noisy in ("torchft", "torchft_quorums", "torchft_commits", "torchft_errors"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # torchft 0.2.0's process-group transport warns on every heal about its own buffer handling
    warnings.filterwarnings("ignore", module="torchft.checkpointing.pg_transport")
    try:
        Experiment(cfg, run_dir).run()
    except Terminated as e:
        return 128 + e.signum
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())
