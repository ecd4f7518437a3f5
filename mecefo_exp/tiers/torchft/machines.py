"""A torchft run's launchers across machines: who joined, who left, and that they run one run.

`Launcher` (launcher.py) is one of these: each machine's launcher says it is alive every
second in the coordination store (`alive/<m>`); machine 0 names the machines never heard of
(after ANNOUNCE_WARN_S) and fails the run naming them at cluster.restart_timeout_s; a launcher
started again on its machine adopts the run under way; a launcher stopped by a signal (not machine
0's) leaves the run as its machine would die; at the end each sets `left/<m>` and machine 0
waits for the live ones before it writes the record. Machine 0 publishes the run's identity in
its store and its run folder, and another machine's launcher refuses a store whose identity its
own run folder does not hold (another run's store at the same address).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Dict, List

from ...errors import ConfigError
from ...metrics import flatten

log = logging.getLogger("mecefo_exp.tiers.torchft.launcher")

POLL_S = 0.05
ALIVE_EVERY_S = 1.0  # each launcher says it is alive this often (machine 0 waits only for live ones)
LEFT_WAIT_S = 60.0  # at the end, machine 0 waits at most this long for the other launchers to leave
#: machine 0 names the machines whose launcher has not said it is alive after this long (it goes on
#: waiting for them until cluster.restart_timeout_s, then fails naming them)
ANNOUNCE_WARN_S = 10.0
#: settings that differ between the launchers of one run (everything else must be machine 0's)
PER_MACHINE = ("cluster.machine_rank", "cluster.bind", "cluster.advertise")


#: where machine 0 writes the run's identity (its folder's), which its store also holds under "run"
RUN_ID_FILE = Path("torchft") / "run-id"
#: a launcher that finds another identity in the store than in its run folder looks this long again
#: before it refuses (a shared file system may show machine 0's file a little late)
SAME_RUN_WAIT_S = 10.0


class WorkerFailed(RuntimeError):
    """The run ends failed: a worker's error, a machine that never joined, the store lost."""


class MachinesOfARun:
    """The part of a launcher that deals with the other machines' launchers (a mixin of Launcher)."""

    def adopt_run_under_way(self) -> None:
        """A launcher started again on its machine: its workers ran before (`launched/<w>`), and
        those processes died with the machine. Survivors still waiting for one of them (it was
        healing when the machine died again) learn so from `exited/<w>/<n>` and ask for the next
        one, which this launcher starts; otherwise they would wait for it forever."""
        for w in self.mine:
            if self.store.check([f"launched/{w}"]):
                self.incarnation[w] = int(self.store.get(f"launched/{w}").decode())
                self.rejoined = True
                self.store.set(f"exited/{w}/{self.incarnation[w]}", repr(time.time()))

    def publish_run(self) -> None:
        """Machine 0, once its store listens: the run's identity, new at every start, in the run folder
        and then in the store. Another machine's launcher joins the store only if its run folder holds
        the same (`check_same_run`): a second run given the same cluster.coordinator reaches this store
        and must not join this run."""
        identity = {"id": uuid.uuid4().hex, "run_dir": str(Path(self.run_dir).resolve()), "host": socket.gethostname()}
        path = Path(self.run_dir) / RUN_ID_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(identity["id"] + "\n")
        os.replace(partial, path)
        self.store.set("run", json.dumps(identity))

    def check_same_run(self) -> None:
        """Another machine's launcher, before it writes anything into the store: the store at
        cluster.coordinator is this run's (machine 0 wrote the identity it holds into this run folder),
        not another run's that listens at the same address. One line (ConfigError) otherwise; the store
        is dropped untouched."""
        theirs = json.loads(self.store.get("run").decode())  # machine 0 sets it before anything else
        path = Path(self.run_dir) / RUN_ID_FILE
        deadline = time.time() + SAME_RUN_WAIT_S
        while True:
            try:
                ours = path.read_text().strip()
            except OSError:
                ours = None
            if ours == theirs["id"]:
                return
            if time.time() >= deadline:
                break
            time.sleep(0.2)
        self.store = None  # nothing of this launcher goes into another run's store
        why = (
            f"this run folder's machine 0 never served a store (no {RUN_ID_FILE}: was that address taken "
            "when it started?)"
            if ours is None
            else f"this run folder's {RUN_ID_FILE} names another"
        )
        raise ConfigError(
            f"cluster.machine_rank={self.machine}: the coordination store at cluster.coordinator="
            f"{self.store_address} belongs to another run (machine 0 of {theirs['run_dir']} on "
            f"{theirs['host']}), not to {self.run_dir}: {why}; give each run its own "
            "cluster.coordinator port"
        )

    def _check_same_settings(self) -> None:
        """A machine's launcher must run machine 0's run: the same settings but its own place."""
        from omegaconf import OmegaConf

        written = self.run_dir / "config.yaml"  # machine 0 writes it before it serves the store
        if not written.is_file():
            raise ConfigError(
                f"machine {self.machine}: {written} is not there: every machine must see the run folder "
                "machine 0 writes (a shared file system, the same hydra.run.dir on each)"
            )
        ours = flatten(OmegaConf.to_container(self.cfg, resolve=True), sep=".")
        theirs = flatten(OmegaConf.to_container(OmegaConf.load(written), resolve=True), sep=".")
        differ = sorted(k for k in set(ours) | set(theirs) if k not in PER_MACHINE and ours.get(k) != theirs.get(k))
        if differ:
            raise ConfigError(
                f"cluster.machine_rank={self.machine}: settings differ from machine 0's run in "
                f"{self.run_dir}: " + "; ".join(f"{k}={ours.get(k)} (machine 0: {theirs.get(k)})" for k in differ[:5])
            )

    def _check_announced(self, now: float) -> None:
        """Machine 0: every other machine's launcher says it is alive within seconds of its start.
        The ones still silent are named after ANNOUNCE_WARN_S, and at cluster.restart_timeout_s the
        run fails naming them (before the workers' own wait for them times out)."""
        if self.machine != 0 or self._unannounced == []:
            return
        missing = [m for m in range(1, self.machines) if not self.store.check([f"alive/{m}"])]
        waited = now - self._started_at
        if missing and waited >= self.cfg.cluster.restart_timeout_s:
            raise WorkerFailed(
                f"{_machines(missing, 'never announced itself', 'never announced themselves')} in "
                f"cluster.restart_timeout_s={self.cfg.cluster.restart_timeout_s:g} s "
                f"(cluster.machines={self.machines}): start each launcher with its "
                f"cluster.machine_rank and cluster.coordinator={self.store_address}, or correct "
                "cluster.machines"
            )
        if missing and waited >= ANNOUNCE_WARN_S and self._unannounced is None:
            log.warning(
                "%s: %s after %.0f s (cluster.machines=%d): waiting until cluster.restart_timeout_s=%g s; "
                "start each launcher with its cluster.machine_rank and cluster.coordinator=%s",
                self.tag,
                _machines(missing, "has not announced itself", "have not announced themselves"),
                waited,
                self.machines,
                self.cfg.cluster.restart_timeout_s,
                self.store_address,
            )
            self._unannounced = missing
        elif not missing:
            self._unannounced = []

    def say_alive(self) -> None:
        """`alive/<m>`, at most every ALIVE_EVERY_S: machine 0 waits at the end for live launchers only."""
        now = time.time()
        if now - self._alive_at >= ALIVE_EVERY_S:
            self.store.set(f"alive/{self.machine}", repr(now))
            self._alive_at = now

    def leave_run(self) -> None:
        """This machine leaves the run under way: its workers die at once, as with the machine (the
        others see them go and ask for their next processes: a launcher started again here gives them)."""
        for w, p in self.procs.items():
            p.kill()
            p.wait()
            self.store.set(f"exited/{w}/{self.incarnation[w]}", repr(time.time()))
        self.procs.clear()
        # not `left/<m>`: that says the run's end is behind this machine, and machine 0 would then
        # not wait for the launcher started here again to see its workers through the end
        self.left_mid_run = True
        log.warning("%s: stopped by a signal: this machine leaves the run, which goes on without it", self.tag)

    def leave(self) -> None:
        """Say this launcher is done with the run's end; machine 0 then waits for the other live launchers."""
        if self.store is None or self.store_lost or self.left_mid_run:
            return
        try:
            self.store.set(f"left/{self.machine}", repr(time.time()))
            if self.machine == 0:
                self._wait_for_launchers()
        except Exception as e:  # the store is gone (machine 0 died): nobody is waiting for this launcher
            log.warning("%s: the coordination store is gone (%s)", self.tag, " ".join(str(e).split())[:200])

    def _wait_for_launchers(self) -> None:
        deadline = time.time() + LEFT_WAIT_S
        for m in range(1, self.machines):
            while time.time() < deadline and not self.store.check([f"left/{m}"]):
                seen = float(self.store.get(f"alive/{m}").decode()) if self.store.check([f"alive/{m}"]) else 0.0
                if time.time() - seen > 5 * ALIVE_EVERY_S:
                    break  # that machine's launcher is gone: nothing to wait for
                time.sleep(POLL_S)

    def processes_started(self) -> Dict[str, int]:
        """How many processes each worker had, on every machine (a restarted job would show more for all)."""
        return {
            str(w): int(self.store.get(f"launched/{w}").decode()) + 1 if self.store.check([f"launched/{w}"]) else 0
            for w in range(self.n)
        }


def _machines(ms: List[int], one: str, many: str) -> str:
    return f"machine {ms[0]} {one}" if len(ms) == 1 else f"machines {', '.join(map(str, ms))} {many}"
