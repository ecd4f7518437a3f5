"""`python run.py cluster=torchft ...`: the lighthouse, the worker processes, their restarts.

This process trains nothing. One launcher runs per machine; machine 0's writes config.yaml and
serves the coordination store and torchft's lighthouse on `cluster.bind`. Each launcher starts
its own workers (`python -m mecefo_exp.torchft_worker <run dir>`)
and watches them: a worker the survivors ask for again is started anew (after killing a hung
old process), a worker that exits with an error ends the run, and how the run ended reaches
every launcher through the store. Whatever happens, a launcher's workers are gone when it
returns. docs/TORCHFT.md tells each case.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from ...errors import ConfigError
from ...metrics import write_json_atomic
from ...signals import Terminated, signals_end_the_run
from .machines import ALIVE_EVERY_S, POLL_S, MachinesOfARun, WorkerFailed
from .network import (
    ENV_ADVERTISE,
    ENV_BIND,
    ENV_INCARNATION,
    ENV_LIGHTHOUSE,
    ENV_STARTED,
    ENV_STORE,
    ENV_WORKER,
    bound_store,
    connect_store,
    host_port,
    local_host,
    network_environment,
    require_torchft,
    split_host_port,
)

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0  # SIGTERM, then this long to write the record, then SIGKILL
#: a process the survivors replaced but still running gets this long to end by itself (a worker
#: failing writes its record first) before it is taken for hung and killed
STALE_GRACE_S = STOP_GRACE_S
STORE_LOST = (
    "machine 0's coordination store is gone: machine 0 died or was stopped, and the run cannot go on "
    "without it (it serves the store and the lighthouse)"
)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it if the launcher dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def workers_of(machine: int, n_workers: int, machines: int) -> List[int]:
    k = n_workers // machines
    return list(range(machine * k, machine * k + k))


class Launcher(MachinesOfARun):
    def __init__(self, cfg, run_dir: Path):
        c = cfg.cluster
        self.cfg, self.run_dir, self.n = cfg, Path(run_dir), c.n_workers
        self.machine, self.machines = c.machine_rank, c.machines
        self.mine = workers_of(self.machine, self.n, self.machines)
        self.bind = c.bind
        self.advertise = c.advertise or local_host(c.bind)
        self.procs: Dict[int, subprocess.Popen] = {}
        self.incarnation: Dict[int, int] = {w: -1 for w in self.mine}  # the newest started (-1: none yet)
        self.lighthouse = None
        self.store = None
        self.lighthouse_address: Optional[str] = None
        self.started_lighthouse = False
        self.rejoined = False  # a launcher started again on a run under way
        self._alive_at = 0.0
        self._started_at = time.time()
        self._unannounced: Optional[List[int]] = None  # machine 0: the machines not heard of yet (None: not named yet)
        self.store_lost = False  # another machine's launcher lost machine 0's store: it closes the record
        self.left_mid_run = False  # stopped by a signal while the run goes on (leave_run)
        self.stale_since: Dict[int, float] = {}  # worker -> when a newer incarnation was asked while its process ran

    @property
    def tag(self) -> str:
        return f"torchft (machine {self.machine})" if self.machines > 1 else "torchft"

    def start_services(self) -> None:
        c = self.cfg.cluster
        self.net_env = network_environment(self.bind)  # one line if no interface has cluster.bind's address
        if self.machine == 0:
            port = split_host_port(c.coordinator, "cluster.coordinator")[1] if c.coordinator else 0
            self.store = bound_store(self.bind, c.restart_timeout_s, port)
            self.store_address = c.coordinator or host_port(self.advertise, self.store.port)
            self.publish_run()  # the other machines' launchers join this store only with this run folder
            self.lighthouse_address = c.lighthouse
            if self.lighthouse_address is None:
                from torchft._torchft import LighthouseServer

                # min_replicas 1: the survivors go on down to one worker; join_timeout: how long a
                # quorum waits for a live worker that is late; heartbeat_timeout: when a silent one is out
                self.lighthouse = LighthouseServer(
                    bind=host_port(self.bind, 0),
                    min_replicas=1,
                    join_timeout_ms=c.join_timeout_ms,
                    heartbeat_timeout_ms=c.heartbeat_timeout_ms,
                )
                # its own address names this host, which may resolve to another interface than the one it listens on
                port = int(self.lighthouse.address().rsplit(":", 1)[1])
                self.lighthouse_address = f"http://{host_port(self.advertise, port)}"
                self.started_lighthouse = True
            self.store.set("lighthouse", self.lighthouse_address)
        else:
            self.store_address = c.coordinator
            try:  # machine 0 may still be starting: the client retries until the timeout
                self.store = connect_store(c.coordinator, c.restart_timeout_s)
                self.lighthouse_address = self.store.get("lighthouse").decode()
            except Exception as e:
                raise WorkerFailed(
                    f"machine {self.machine}: cannot reach machine 0's coordination store at "
                    f"cluster.coordinator={c.coordinator} ({' '.join(str(e).split())[:200]})"
                ) from None
            self.check_same_run()  # another run's store at that address: refused before anything is written
            self._check_same_settings()
        self.adopt_run_under_way()
        log.info(
            "%s: lighthouse %s%s, coordination store %s, workers %s%s, logs in %s",
            self.tag,
            self.lighthouse_address,
            " (started for this run)" if self.lighthouse else "",
            self.store_address,
            self.mine,
            " (joining the run under way)" if self.rejoined else "",
            self.run_dir / "torchft",
        )

    def start_workers(self) -> None:
        if self.rejoined:
            return  # the watch starts the processes the survivors ask for
        for w in self.mine:
            self.start_worker(w, 0)

    def start_worker(self, w: int, incarnation: int) -> None:
        env = {
            **self.net_env,
            "TORCH_CPP_LOG_LEVEL": "ERROR",
            **os.environ,
            ENV_WORKER: str(w),
            ENV_INCARNATION: str(incarnation),
            ENV_LIGHTHOUSE: self.lighthouse_address,
            ENV_STORE: self.store_address,
            ENV_STARTED: repr(time.time()),
            ENV_BIND: self.bind,
            ENV_ADVERTISE: self.advertise,
        }
        self.procs[w] = subprocess.Popen(
            [sys.executable, "-m", "mecefo_exp.torchft_worker", str(self.run_dir)], env=env, preexec_fn=_die_with_parent
        )
        self.incarnation[w] = incarnation
        self.store.set(f"launched/{w}", str(incarnation))
        if incarnation:
            log.info(
                "%s: worker %d started again (process %d, incarnation %d)", self.tag, w, self.procs[w].pid, incarnation
            )

    def kill_stale(self, w: int, wanted: int) -> None:
        """The survivors gave up on worker w's process and want a new one, but the old one is still
        there: hung (stopped, deadlocked) or cut off, it missed their quorums. It cannot rejoin as what
        it was, and it holds w's place: it is killed before the new one starts."""
        p = self.procs.pop(w)
        log.warning(
            "%s: worker %d's process %d (incarnation %d) is still there but out of the run (hung?): "
            "killed, incarnation %d replaces it",
            self.tag,
            w,
            p.pid,
            self.incarnation[w],
            wanted,
        )
        p.kill()  # SIGKILL: a stopped process ignores everything else
        p.wait()

    def end(self) -> Optional[dict]:
        """How the run ended, once some launcher has said so."""
        return json.loads(self.store.get("end").decode()) if self.store.check(["end"]) else None

    def announce_end(self, status: str, error: Optional[str] = None) -> dict:
        """Say how the run ended, unless another launcher said it first; returns what stands."""
        mine = json.dumps({"status": status, "error": error, "machine": self.machine})
        return json.loads(self.store.compare_set("end", "", mine).decode())

    def watch(self) -> None:
        """Until the run has ended: planned deaths, restarts, real faults, the other launchers' news.
        Another machine's launcher that loses machine 0's store fails in one line (STORE_LOST)."""
        try:
            self._watch()
        except (WorkerFailed, Terminated):
            raise
        except Exception as e:
            if self.machine == 0 or type(e).__name__ not in ("DistNetworkError", "DistStoreError"):
                raise
            self.store_lost = True
            raise WorkerFailed(STORE_LOST) from None

    def _watch(self) -> None:
        while True:
            now = time.time()
            if now - self._alive_at >= ALIVE_EVERY_S:
                self.say_alive()
                self._check_announced(now)
            ended = self.end()
            if ended is not None:
                if ended["status"] != "ok":
                    raise WorkerFailed(
                        ended["error"]
                        if ended["machine"] == self.machine
                        else f"machine {ended['machine']}: {ended['error']}"
                    )
                self.finish()
                return
            for w, p in list(self.procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del self.procs[w]
                self.stale_since.pop(w, None)
                planned = self.store.check([f"killed/{w}/{self.incarnation[w]}"])
                if rc == 0:  # a worker ends only when the run is done
                    self.announce_end("ok")
                    continue
                if rc == -signal.SIGKILL:
                    if not planned:
                        log.warning(
                            "%s: worker %d was SIGKILLed from outside: a real fault, the others go on", self.tag, w
                        )
                        # the survivors may be waiting for this very process (it was healing): they
                        # ask for the next one when they read this
                        self.store.set(f"exited/{w}/{self.incarnation[w]}", repr(time.time()))
                    continue
                raise WorkerFailed(f"worker {w} exited with code {rc} (its log: {self.run_dir}/torchft/worker-{w}.log)")
            for w in self.mine:
                if not self.store.check([f"restart/{w}"]):
                    continue
                wanted = int(self.store.get(f"restart/{w}").decode())
                if wanted > self.incarnation[w]:
                    if w in self.procs:
                        # it may be on its way out (an error, a signal: its record first), which the poll
                        # above then reports as such; only one still there after the grace is stale
                        noticed = self.stale_since.setdefault(w, now)
                        if now - noticed < STALE_GRACE_S:
                            continue
                        self.kill_stale(w, wanted)
                    self.stale_since.pop(w, None)
                    self.start_worker(w, wanted)
            time.sleep(POLL_S)

    def finish(self) -> None:
        """The run is done: this machine's workers end on their own (the last step is behind them)."""
        deadline = time.time() + self.cfg.cluster.quorum_timeout_s
        # read from the store before waiting: machine 0 stops it once every live launcher has left
        healed = {
            w: self.incarnation[w] == 0 or self.store.check([f"heal/{w}/{self.incarnation[w]}"]) for w in self.procs
        }
        for w, p in list(self.procs.items()):
            if not healed[w]:
                continue  # started again but never healed into the run (it ended first): stop() ends it
            while (rc := p.poll()) is None:  # still alive meanwhile: machine 0 waits only for live launchers
                if time.time() > deadline:
                    raise WorkerFailed(f"worker {w} did not end with the run")
                try:
                    self.say_alive()
                except Exception:  # machine 0 is gone: nobody waits for this launcher any more
                    pass
                time.sleep(POLL_S)
            del self.procs[w]
            if rc != 0:
                raise WorkerFailed(
                    f"worker {w} exited with code {rc} at the end of the run "
                    f"(its log: {self.run_dir}/torchft/worker-{w}.log)"
                )

    def stop(self) -> None:
        """Every worker of this machine gone; safe to call twice."""
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

    def shutdown_services(self) -> None:
        if self.lighthouse is not None:
            self.lighthouse.shutdown()
            self.lighthouse = None
        self.store = None  # machine 0's: its server closes with it


def launch(cfg, run_dir: Path) -> dict:
    """Run `cfg` on torchft (this machine's part); returns the run's summary (status ok), or
    raises with it failed."""
    from ...run.resume import save_run_config

    # torchft's lighthouse and managers log every quorum at info (read once, at torchft's import)
    os.environ.setdefault("RUST_LOG", "warn")
    require_torchft()
    run_dir = Path(run_dir)
    machine = cfg.cluster.machine_rank
    if machine == 0:  # what every worker process loads (and at the start, start.json beside it)
        save_run_config(cfg, run_dir, start=not cfg.resume)
    (run_dir / "torchft").mkdir(parents=True, exist_ok=True)
    launcher = Launcher(cfg, run_dir)
    error: Optional[str] = None
    try:
        with signals_end_the_run():
            launcher.start_services()
            launcher.start_workers()
            launcher.watch()
    except ConfigError:  # found before any worker started: one line (cli), no record of a run
        launcher.stop()
        launcher.shutdown_services()
        raise
    except BaseException as e:
        if isinstance(e, Terminated) and machine > 0 and launcher.store is not None:
            launcher.leave_run()  # SLURM preempts with SIGTERM first: this machine leaves; the run goes on
            raise
        error = f"{type(e).__name__}: {e}" if not isinstance(e, WorkerFailed) else str(e)
        if launcher.store is not None and not launcher.store_lost:
            try:  # the other launchers stop their workers too
                launcher.announce_end("failed", error)
            except Exception:
                pass
        raise
    finally:
        launcher.stop()
        launcher.leave()
        summary = _read_summary(run_dir)
        if machine == 0 and launcher.store is not None:
            if error is None and summary.get("status") != "ok":
                error = "every worker process ended, but none wrote a finished record"
            if error is not None:
                if summary.get("status") == "running":  # the leader died before it could close its record
                    summary.update(_progress_of(run_dir))
                summary.update(status="failed", error=f"torchft launcher: {error}")
            # what only the launchers know: where the lighthouse was, how many processes each worker had
            try:
                started = launcher.processes_started()
            except Exception:
                started = {}
            summary.setdefault("torchft", {}).update(
                lighthouse=launcher.lighthouse_address,
                lighthouse_started_here=launcher.started_lighthouse,
                machines=launcher.machines,
                processes_started=started,
            )
            write_json_atomic(run_dir / "summary.json", summary)
        elif launcher.store_lost and summary.get("status") == "running":  # nobody else is left to close the record
            summary.update(_progress_of(run_dir))  # the leader died with machine 0: its summary says where it began
            summary.update(status="failed", error=f"torchft launcher (machine {machine}): {error}")
            write_json_atomic(run_dir / "summary.json", summary)
        launcher.shutdown_services()
    if machine == 0 and summary.get("status") != "ok":
        raise WorkerFailed(summary.get("error", "failed"))
    return {**summary, "final_val_ppl": summary.get("final_val_ppl")}


def _progress_of(run_dir: Path) -> dict:
    """How far the run got, from the last whole row of metrics.jsonl (the leader writes one per step;
    its summary.json says `running` with the steps of when it last wrote it): for a record that a
    launcher closes because its writer died."""
    try:
        text = (run_dir / "metrics.jsonl").read_text()
        row = json.loads(text[: text.rfind("\n")].rsplit("\n", 1)[-1])
    except (OSError, ValueError):
        return {}
    if not isinstance(row, dict) or not isinstance(row.get("step"), int) or "tokens" not in row:
        return {}
    sim = row.get("sim_time_s") or 0.0
    return {
        "steps": row["step"] + 1,
        "tokens_committed": row["tokens"],
        "sim_time_s": sim,
        "throughput_tok_s": row["tokens"] / sim if sim > 0 else None,
    }


def _read_summary(run_dir: Path) -> dict:
    import json

    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {"run_dir": str(run_dir)}
