"""One process per worker, membership from torchft's quorum: real kills, real rejoins.

Every worker process runs the torchrun tier's loop (the same trace, method books and plan; it
computes only its own micro-batches). What changes is who is alive: the survivors act only on
what torchft's quorum shows. A trace failure SIGKILLs the worker's own process; the others hear
of it at the quorum that misses it. A recovery, a spare or a replacement after an unplanned
death is a new process that heals from a live peer (model, optimizer and the harness's books
over the process group, no disk) before everyone runs `on_recoveries`. Gradients are summed with
torchft's allreduce and divided by the plan's contributor counts, as on every tier; a step is
applied only when `should_commit` agrees. One process, the lowest live worker, writes the record.
docs/TORCHFT.md has the whole protocol and the coordination store's keys.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import time
from typing import Dict, List, Optional, Set

import torch

from ...failures import FAIL, RECOVER
from .collectives import closing_gloo, sum_over_quorum, tensor_bytes
from .network import (
    ENV_ADVERTISE,
    ENV_BIND,
    ENV_STARTED,
    LOOPBACK,
    bound_store,
    connect_store,
    local_host,
    manager_server_bound_to,
)
from .replaced import ReplacementWatch, leave_if_replaced

log = logging.getLogger(__name__)

QUORUM_ATTEMPTS = 5  # how often a quorum is taken again when a peer died inside its membership all-reduce
#: how often a worker waiting for a restarted peer looks whether it is up, or died
WAIT_POLL_S = 0.05


class ReplacedInQuorum(Exception):
    """A quorum holds a process the survivors replaced (hung or stopped past their timeouts, then
    back): it is not admitted, and the quorum is taken again once it has left."""


class TorchftMembership:
    """Which workers are alive, as torchft's quorum says; the method hears it from here.

    Its books (`state_dict`) travel with the model when a worker heals, so a rejoining
    process knows what its peers know.
    """

    def __init__(
        self, run, worker: int, incarnation: int, lighthouse: str, store_address: str, cfg, membership_from_quorum: bool
    ):
        self.run, self.me, self.n = run, worker, run.n_workers
        # failure.kill=false: every process stays up and the trace masks failed workers (simulated membership)
        self.from_quorum = membership_from_quorum
        self.store = connect_store(store_address, cfg.restart_timeout_s)
        self.watch = ReplacementWatch(store_address, cfg.restart_timeout_s, worker, incarnation)
        self.restart_timeout_s = cfg.restart_timeout_s
        self.joining = incarnation > 0  # a restarted process: it enters where its peers are
        # the books (identical on every live worker)
        self.live: Set[int] = set(range(self.n))
        # which process of each worker the survivors want; this worker's own entry is this process's
        # (its launcher's word), which a heal does not overwrite: the books may already want a newer one
        self.incarnation: Dict[int, int] = {w: 0 for w in range(self.n)}
        self.incarnation[worker] = incarnation
        self.awaiting: Dict[int, float] = {}  # restarted workers not yet in a quorum -> when asked
        # of those, the ones that died unplanned (a crash, a whole machine gone): the survivors go
        # on without them and admit them when they are back, unless the plan needs them
        self.replacing: Set[int] = set()
        self.pending: List[dict] = []  # trace events the quorum has not shown yet, in trace order
        self.leader = 0
        # restarts_lost: processes asked for that died before they were in a quorum (healing)
        self.real: Dict[str, list] = {"failures": [], "recoveries": [], "spares": [], "restarts_lost": []}
        self.manager = self._start_manager(lighthouse, cfg)

    # ------------------------------------------------------------ torchft
    def _start_manager(self, lighthouse: str, cfg):
        from torchft import Manager, ProcessGroupNCCL
        from torchft.checkpointing.pg_transport import PGTransport

        # this machine's listening address and the name its peers on other machines reach it by
        bind = os.environ.get(ENV_BIND, LOOPBACK)
        advertise = os.environ.get(ENV_ADVERTISE) or local_host(bind)
        # the replica group's own store (one process per group here); the quorum hands its
        # address to every peer, which rendezvous there to build the next process group
        self._group_store = bound_store(bind, cfg.quorum_timeout_s)
        timeout = datetime.timedelta(seconds=cfg.quorum_timeout_s)
        backend = cfg.backend
        if backend == "nccl" or (backend == "auto" and self.run.device.type == "cuda"):
            self.group, pg = None, ProcessGroupNCCL(timeout=timeout)  # failures left to torchft's own handling
        else:
            self.group = pg = closing_gloo(timeout)
        # a heal is sent over the process group (gloo on cluster.bind's interface), not by
        # torchft's default HTTP server, which would listen on every interface
        transport = PGTransport(pg, timeout=timeout, device=self.run.device)
        with manager_server_bound_to(bind):
            return Manager(
                pg=pg,
                min_replica_size=1,
                load_state_dict=self._load_from_peer,
                state_dict=self._state_for_peer,
                replica_id=f"worker{self.me}",
                store_addr=advertise,
                store_port=self._group_store.port,
                rank=0,
                world_size=1,
                lighthouse_addr=lighthouse,
                port=0,
                hostname=advertise,
                use_async_quorum=False,
                init_sync=False,
                timeout=timeout,
                quorum_timeout=timeout,
                connect_timeout=timeout,
                checkpoint_transport=transport,
            )

    def _state_for_peer(self) -> dict:
        """What a healing peer receives: the training state and every book a later step reads."""
        return {
            "training": self.run.state_dict(),
            "books": self.run.books.state_dict(),
            "membership": self.state_dict(),
        }

    def _load_from_peer(self, state: dict) -> None:
        self._healed_bytes = tensor_bytes(state)
        self.run.load_peer_state(state["training"], state["books"])
        self.load_state_dict(state["membership"])

    def state_dict(self) -> dict:
        return {
            "live": sorted(self.live),
            "incarnation": dict(self.incarnation),
            "awaiting": dict(self.awaiting),
            "replacing": sorted(self.replacing),
            "pending": [dict(e) for e in self.pending],
            "leader": self.leader,
            "real": json.loads(json.dumps(self.real)),
        }

    def load_state_dict(self, s: dict) -> None:
        own = self.incarnation[self.me]  # this process; a replaced one learns so from `restart/<me>`
        self.live, self.awaiting, self.replacing = set(s["live"]), dict(s["awaiting"]), set(s["replacing"])
        self.incarnation = {int(k): v for k, v in s["incarnation"].items()}
        self.incarnation[self.me] = own
        self.pending, self.leader, self.real = list(s["pending"]), s["leader"], s["real"]
        self.run.leader = self.leader

    def start(self) -> None:
        """First processes: wait until every worker's Manager heartbeats, then one empty
        committed step, so that a process started later (torchft step 0) is behind its
        peers and heals from them."""
        if self.joining:
            return
        self._ready()
        self.store.wait([f"ready/{w}/0" for w in range(self.n)], datetime.timedelta(seconds=self.restart_timeout_s))
        self.manager.start_quorum()
        if not self.manager.should_commit():
            raise RuntimeError("torchft: the first quorum did not commit")

    def _ready(self) -> None:
        self.store.set(f"ready/{self.me}/{self.incarnation[self.me]}", repr(time.time()))

    def _quorum(self) -> Set[int]:
        """torchft's quorum as a set of workers (healing this process if behind); taken again when a
        peer dies inside the membership all-reduce, none forms in time, or it holds a replaced process."""
        attempt, waiting_since, replaced_since = 1, None, None
        while True:
            try:
                members = self._one_quorum()
            except TimeoutError as e:
                waiting_since = waiting_since or time.time()
                self._no_quorum_in_time(e, time.time() - waiting_since)
                continue
            except ReplacedInQuorum as e:
                replaced_since = replaced_since or time.time()
                if time.time() - replaced_since > self.restart_timeout_s:
                    raise RuntimeError(
                        f"torchft: {e} in every quorum for cluster.restart_timeout_s={self.restart_timeout_s:g} s"
                    ) from None
                log.warning("torchft: %s: not admitted; quorum again without it", e)
                continue
            if members is not None:
                return members
            if attempt == QUORUM_ATTEMPTS:
                raise RuntimeError(
                    f"torchft: the membership all-reduce failed {attempt} times: {self.manager.errored()}"
                )
            log.warning(
                "torchft: a peer died during the membership all-reduce (%s); quorum again (%d of %d)",
                self.manager.errored(),
                attempt,
                QUORUM_ATTEMPTS,
            )
            attempt += 1

    def _no_quorum_in_time(self, error: TimeoutError, waited_s: float) -> None:
        """No quorum within cluster.quorum_timeout_s: the lighthouse forms none of half the heartbeating
        workers or fewer (split brain), and a live peer may still retry gloo's connection to a member that
        died while the last group was set up (several collective timeouts, where others failed at once)."""
        said = " ".join(str(error).split())[:120]  # torchft's own: "status: Cancelled, ..."
        if waited_s > self.restart_timeout_s:
            raise RuntimeError(
                f"torchft: no quorum within cluster.restart_timeout_s={self.restart_timeout_s:g} s ({said})"
            )
        log.warning("torchft: no quorum in time (%s); quorum again (waiting %.0f s)", said, waited_s)
        self.manager._quorum_future = None  # torchft 0.2.0 would raise this error again at the next quorum

    def _one_quorum(self) -> Optional[Set[int]]:
        self._leave_if_replaced()
        started = time.time()
        self.manager.start_quorum()
        self._quorum_at = time.time()
        self._quorum_s = self._quorum_at - started
        if self.joining:
            healed = getattr(self, "_healed_bytes", None)
            if healed is None:
                if self.manager.errored() is not None:  # the peer sending the state died: heal again
                    log.warning(
                        "torchft: worker %d's heal failed (%s); quorum again",
                        self.me,
                        " ".join(str(self.manager.errored()).split())[:200],
                    )
                    return None
                raise RuntimeError(f"torchft: worker {self.me} rejoined without healing from a peer")
            me, n = self.me, self.incarnation[self.me]
            self.store.set(
                f"heal/{me}/{n}",
                json.dumps(
                    {
                        "started_at": float(os.environ.get(ENV_STARTED, started)),
                        "quorum_and_heal_s": self._quorum_s,
                        "state_bytes": healed,
                    }
                ),
            )
            self.joining = False
        # who is in the quorum, and which process of each: torchft knows a worker by its replica id
        # alone, which every process of that worker shares
        processes = torch.zeros(self.n, dtype=torch.float64, device=self.run.device)
        processes[self.me] = self.incarnation[self.me] + 1.0
        sum_over_quorum(self.manager, processes, self.group)
        if self.manager.errored() is not None:
            return None
        self._leave_if_replaced()  # the survivors may have replaced this process since it asked
        got = {w: round(processes[w].item()) - 1 for w in range(self.n) if processes[w].item() > 0.5}
        replaced = {w: n for w, n in got.items() if n != self.incarnation[w]}
        if replaced:
            raise ReplacedInQuorum(
                "; ".join(
                    f"worker {w}'s process {n} is in the quorum where process {self.incarnation[w]} is wanted"
                    for w, n in sorted(replaced.items())
                )
            )
        return set(got)

    def _leave_if_replaced(self) -> None:
        """Before a quorum: a process the survivors replaced leaves before it could enter one (and
        hold up the one they want) or write the record."""
        leave_if_replaced(self.store, self.me, self.incarnation[self.me])

    def barrier(self) -> None:
        """Every live worker gets here (a checkpoint file is complete before anyone reads it)."""
        sum_over_quorum(self.manager, torch.zeros(1, device=self.run.device), self.group)

    # ------------------------------------------------------------ the trace
    def on_trace_events(self, kind: str, events) -> None:
        """Events of one instant from the trace: deaths happen now, hooks wait for the quorum."""
        workers = [ev.worker for ev in events]
        if kind == FAIL:
            if self.me in workers:
                self._die(events[0].time)
            self.pending.append({"kind": FAIL, "workers": workers, "time": events[0].time, "confirm": True})
            return
        for ev in events:
            dead = ev.worker not in self.live
            if dead:
                self._request_restart(ev.worker)
            self.pending.append({"kind": RECOVER, "workers": [ev.worker], "time": ev.time, "confirm": dead})

    def _die(self, trace_time: float) -> None:
        me, n = self.me, self.incarnation[self.me]
        self.store.set(f"killed/{me}/{n}", repr(time.time()))
        log.warning("failure.kill: worker %d (process %d) is killed at simulated %.3f s", me, os.getpid(), trace_time)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def _request_restart(self, worker: int) -> None:
        self.incarnation[worker] += 1
        self.awaiting[worker] = time.time()
        self.store.set(f"restart/{worker}", str(self.incarnation[worker]))

    # ------------------------------------------------------------ the quorum
    def sync(self) -> None:
        """Before planning a step: a quorum; the method hears what it shows; spares if needed."""
        if self.joining:
            self._ready()  # the peers wait for this before their quorum
        while True:
            self._ask_again_for_lost_restarts()
            self._wait_for_restarts()
            late = [
                w
                for w, asked in self.awaiting.items()
                if w not in self.replacing and time.time() - asked > self.restart_timeout_s
            ]
            if late:  # up (its Manager said so) but never in a quorum: it died after starting
                raise RuntimeError(
                    f"torchft: restarted workers {late} did not join a quorum within "
                    f"cluster.restart_timeout_s={self.restart_timeout_s:g} s"
                )
            quorum = self._quorum()
            self._apply(quorum)
            needed = self.run.method.needs_workers()
            self.replacing -= needed  # a plan that needs a worker waits for it (a spare, as below)
            spares = needed - self.live - set(self.awaiting)
            if not spares and not set(self.awaiting) - self.replacing:
                return
            for w in sorted(spares):
                log.info("worker %d is needed by the plan but down: starting a spare", w)
                self._request_restart(w)

    def _ask_again_for_lost_restarts(self) -> None:
        """A process asked for that died before any quorum took it in (killed while it started
        or healed, or its machine died again): nobody else would ask for the next one."""
        for w in sorted(self.awaiting):
            n = self.incarnation[w]
            if not self.store.check([f"exited/{w}/{n}"]):
                continue
            lost = {
                "worker": w,
                "incarnation": n,
                "step": self.run.step,
                "died_at": float(self.store.get(f"exited/{w}/{n}").decode()),
            }
            self.real["restarts_lost"].append(lost)
            self.run.event("restart_lost", w, {"membership": "torchft", **lost})
            self._request_restart(w)

    def _wait_for_restarts(self) -> None:
        """Until every restarted worker the survivors wait for has its Manager up; one that dies
        meanwhile is asked for again."""
        while True:
            down = [
                w
                for w in sorted(set(self.awaiting) - self.replacing)
                if not self.store.check([f"ready/{w}/{self.incarnation[w]}"])
            ]
            if not down:
                return
            late = [w for w in down if time.time() - self.awaiting[w] > self.restart_timeout_s]
            if late:
                raise RuntimeError(
                    f"torchft: restarted workers {late} were not up within "
                    f"cluster.restart_timeout_s={self.restart_timeout_s:g} s"
                )
            time.sleep(WAIT_POLL_S)
            self._ask_again_for_lost_restarts()

    def _apply(self, quorum: Set[int]) -> None:
        if self.leader not in quorum:  # the writer died: the lowest live worker takes the record over
            self.leader = min(quorum)
            self.run.set_leader(self.leader)
        run = self.run
        back: List[int] = []  # confirmed in this quorum: they reach the method together, as a trace's
        i = 0  # recoveries of one instant do (Oobleck re-forms once for a whole machine)
        while i < len(self.pending):
            ev = self.pending[i]
            workers = ev["workers"]
            if ev["kind"] == FAIL:
                if back:  # the trace's order: the recoveries before this failure first
                    run.method.on_recoveries(back)
                    back = []
                still = [w for w in workers if w in quorum]
                if still:
                    raise RuntimeError(
                        f"torchft: workers {still} were killed by the trace at {ev['time']:.3f} s but "
                        "are still in the quorum"
                    )
                for w in workers:
                    killed_at = float(self.store.get(f"killed/{w}/{self.incarnation[w]}").decode())
                    real = {
                        "worker": w,
                        "step": run.step,
                        "detection_s": self._quorum_at - killed_at,
                        "quorum_s": self._quorum_s,
                        "survivors": len(quorum),
                    }
                    self.real["failures"].append(real)
                    run.membership_event(FAIL, w, {"trace_time_s": ev["time"], "membership": "torchft", **real})
                self.live -= set(workers)
                run.method.on_failures(workers)
            else:
                (w,) = workers
                if ev["confirm"] and w not in quorum:
                    if ev["time"] is None:  # an unplanned death's next process, not up yet: the rest goes on
                        i += 1
                        continue
                    break  # not back yet (it was slower than the quorum): keep the trace's order
                detail: Dict[str, object] = {"unplanned": True} if ev["time"] is None else {"trace_time_s": ev["time"]}
                detail["membership"] = "torchft"
                if ev["confirm"]:
                    detail.update(self._rejoined(w))
                    self.real["recoveries"].append({"worker": w, "step": run.step, **detail})
                else:
                    detail["note"] = "its process already ran as a spare"
                self.live.add(w)
                run.membership_event(RECOVER, w, detail)
                back.append(w)
            self.pending.pop(i)
        if back:
            run.method.on_recoveries(back)
        # real faults the trace did not plan (a crash; a whole machine: all of its workers in one
        # quorum), reaching the method together as a trace's failures of one instant do
        missing = sorted(self.live - quorum)
        for w in missing:
            real = {
                "worker": w,
                "step": run.step,
                "unplanned": True,
                "survivors": len(quorum),
                "detected_at": self._quorum_at,
            }
            self.real["failures"].append(real)
            run.membership_event(FAIL, w, {"membership": "torchft", **real})
        if missing:
            self.live -= set(missing)
            run.method.on_failures(missing)
        for w in missing:  # its next process at once; the survivors go on until it is back
            if not any(e["kind"] == FAIL and w in e["workers"] for e in self.pending):
                self._request_restart(w)
                self.replacing.add(w)
                self.pending.append({"kind": RECOVER, "workers": [w], "time": None, "confirm": True})
        for w in sorted(quorum - self.live):  # spares the plan asked for
            if not any(e["kind"] == RECOVER and w in e["workers"] for e in self.pending):
                spare = {"worker": w, "step": run.step, **self._rejoined(w)}
                self.real["spares"].append(spare)
                run.event("spare", w, {"membership": "torchft", **spare})
                self.live.add(w)

    def _rejoined(self, w: int) -> dict:
        """The real cost of worker w's restart: request -> Manager up -> quorum and heal."""
        asked = self.awaiting.pop(w, self._quorum_at)
        self.replacing.discard(w)
        n = self.incarnation[w]
        # both written before that process's membership all-reduce, which showed it is process n:
        # read, never waited for (a wait here would outlast a process that dies)
        if not self.store.check([f"ready/{w}/{n}", f"heal/{w}/{n}"]):
            raise RuntimeError(
                f"torchft: worker {w}'s process {n} is in the quorum but never said it was up and healed"
            )
        ready_at = float(self.store.get(f"ready/{w}/{n}").decode())
        heal = json.loads(self.store.get(f"heal/{w}/{n}").decode())
        return {
            "process_start_to_ready_s": ready_at - heal["started_at"],
            "heal_s": heal["quorum_and_heal_s"],
            "state_bytes": heal["state_bytes"],
            "requested_to_rejoined_s": self._quorum_at - asked,
        }

    def summary(self) -> dict:
        det = [f["detection_s"] for f in self.real["failures"] if "detection_s" in f]
        heal = [r["heal_s"] for r in self.real["recoveries"] + self.real["spares"]]
        return {
            "membership": "torchft" if self.from_quorum else "trace",
            **self.real,
            "detection_s_mean": sum(det) / len(det) if det else None,
            "heal_s_mean": sum(heal) / len(heal) if heal else None,
        }

    def shutdown(self) -> None:
        self.watch.stop()
        self.manager.shutdown(wait=False)
