"""TorchftMembership's decisions against a stand-in for torchft's Manager and the coordination
store (fast: no processes). The real faults are in test_torchft.py (slow)."""

import types

import pytest
import torch

from mecefo_exp.tiers.torchft.membership import TorchftMembership


class Store:
    def __init__(self):
        self.keys = {}

    def set(self, key, value):
        self.keys[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.keys[key]

    def check(self, keys):
        return all(k in self.keys for k in keys)


class Manager:
    """A quorum of workers 1 and 2; the heal either fails (its peer died) or delivers the state."""

    def __init__(self, membership, heals):
        self.membership, self.heals, self.error = membership, list(heals), None

    def start_quorum(self):
        healed = self.heals.pop(0)
        self.error = None if healed else RuntimeError("Connection closed by peer")
        if healed:
            self.membership._healed_bytes = 123

    def errored(self):
        return self.error

    def allreduce(self, tensor, reduce_op=None):
        tensor[2] = 1.0  # worker 2's one-hot: it is in the quorum too
        return types.SimpleNamespace(wait=lambda: None)


def joining_worker(heals):
    m = object.__new__(TorchftMembership)
    m.me, m.n, m.joining, m.group = 1, 3, True, None
    m.incarnation = {0: 0, 1: 1, 2: 0}
    m.store = Store()
    m.run = types.SimpleNamespace(device=torch.device("cpu"))
    m.manager = Manager(m, heals)
    return m


def test_a_heal_whose_peer_died_is_taken_again_not_a_worker_error():
    """A restarted worker heals in its first quorum; the peer sending the state dies during it
    (torchft reports the error and loads nothing). The worker takes the quorum again and heals
    from a live peer: one worker's error would end the whole run."""
    m = joining_worker(heals=[False, True])
    assert m._quorum() == {1, 2}
    assert not m.joining and "heal/1/1" in m.store.keys


def test_a_quorum_that_healed_nothing_without_an_error_is_still_refused():
    m = joining_worker(heals=[None])
    m.manager.errored = lambda: None
    with pytest.raises(RuntimeError, match="rejoined without healing"):
        m._one_quorum()


class LateManager(Manager):
    """torchft 0.2.0's Manager where the lighthouse forms no quorum in time at first: start_quorum
    raises TimeoutError, and raises it again at the next start_quorum unless it was handled."""

    def __init__(self, membership, timeouts):
        super().__init__(membership, heals=[True])
        self.timeouts, self._quorum_future = timeouts, None

    def start_quorum(self):
        if self._quorum_future is not None:
            raise self._quorum_future
        if self.timeouts:
            self.timeouts -= 1
            self._quorum_future = TimeoutError('status: Cancelled, message: "Timeout expired"')
            raise self._quorum_future
        super().start_quorum()


def test_a_quorum_that_does_not_form_in_time_is_taken_again_not_a_worker_error():
    """A replacement died while its first group was set up: one survivor failed at once, the other
    still retries gloo's connection to it (several collective timeouts). The lighthouse forms no
    quorum of one of two live workers, so the first survivor's quorum times out. It takes the quorum
    again until its peer is back (it exited with that TimeoutError, and the run failed)."""
    m = joining_worker(heals=[])
    m.joining, m.restart_timeout_s = False, 300.0
    m.manager = LateManager(m, timeouts=3)
    assert m._quorum() == {1, 2}
    m.manager = LateManager(m, timeouts=3)
    m.restart_timeout_s = -1.0  # never back: the run fails in one line, after cluster.restart_timeout_s
    with pytest.raises(RuntimeError, match="no quorum within cluster.restart_timeout_s"):
        m._quorum()


def test_a_replacement_that_died_before_any_quorum_is_asked_for_again_and_recorded():
    """Worker 1's replacement (incarnation 1) died while it started or healed: its launcher (or the
    launcher started again on its machine) wrote `exited/1/1`. The survivors ask for incarnation 2
    and record the lost one; nobody else would."""
    events = []
    m = object.__new__(TorchftMembership)
    m.incarnation, m.awaiting, m.store = {0: 0, 1: 1, 2: 0}, {1: 0.0}, Store()
    m.real = {"restarts_lost": []}
    m.run = types.SimpleNamespace(step=7, event=lambda kind, w, detail: events.append((kind, w)))
    m.store.set("restart/1", "1")
    m.store.set("exited/1/1", "5.0")
    m._ask_again_for_lost_restarts()
    assert m.store.get("restart/1") == b"2" and m.incarnation[1] == 2 and 1 in m.awaiting
    assert m.real["restarts_lost"] == [{"worker": 1, "incarnation": 1, "step": 7, "died_at": 5.0}]
    assert events == [("restart_lost", 1)]
    m._ask_again_for_lost_restarts()  # incarnation 2 is alive: nothing more
    assert m.incarnation[1] == 2 and len(events) == 1


def test_a_launcher_started_again_says_its_predecessors_processes_are_gone():
    """A machine died again while its restarted workers healed; its launcher, started a third time,
    finds their incarnations in the store and says they exited, so that the survivors ask for new
    ones (it starts what they ask for)."""
    from mecefo_exp.tiers.torchft.launcher import Launcher

    launcher = object.__new__(Launcher)
    launcher.mine, launcher.rejoined, launcher.store = [2, 3], False, Store()
    launcher.incarnation = {2: -1, 3: -1}
    launcher.store.set("launched/2", "1")
    launcher.store.set("launched/3", "1")
    launcher.adopt_run_under_way()
    assert launcher.rejoined and launcher.incarnation == {2: 1, 3: 1}
    assert launcher.store.check(["exited/2/1", "exited/3/1"])


def test_a_machine_whose_run_folder_is_not_machine_0s_is_one_line(tmp_path):
    """Machine 1 reached machine 0's store, but its run folder is not the shared one (no config.yaml
    there): one line saying so, not a FileNotFoundError's traceback."""
    from omegaconf import OmegaConf

    from mecefo_exp.config import ConfigError
    from mecefo_exp.tiers.torchft.launcher import Launcher

    launcher = object.__new__(Launcher)
    launcher.machine, launcher.run_dir = 1, tmp_path / "ft"
    launcher.cfg = OmegaConf.create({"cluster": {"machine_rank": 1}})
    with pytest.raises(
        ConfigError,
        match="machine 1: .*config.yaml.* is not there: every machine must see the run folder machine 0 writes",
    ) as e:
        launcher._check_same_settings()
    assert "\n" not in str(e.value)


def test_failures_no_trace_planned_count_in_the_mean_workers_down():
    """torchft's summary said mean_workers_down 0.0 after workers killed from outside, where the
    metrics' `alive` gave 0.8-1.9 down on average: only the trace's failures were counted."""
    from mecefo_exp.failures import FAIL, RECOVER, Trace
    from mecefo_exp.run.books import Books
    from mecefo_exp.run.context import Context
    from mecefo_exp.timing import SimClock

    trace = Trace([], 3, 100.0, {"failures": 0.0, "unit_failures": 0.0, "mean_workers_down": 0.0})
    method = types.SimpleNamespace(state_dict=lambda: {}, load_state_dict=lambda state: None)
    books = Books(SimClock())
    books.keep(trace, method, None)
    run = types.SimpleNamespace(event=lambda *args: None, books=books, clock=books.clock)
    books.clock.charge("stall", 10.0)
    Context.membership_event(run, FAIL, 1, {"membership": "torchft", "unplanned": True})
    books.clock.charge("stall", 20.0)
    Context.membership_event(run, RECOVER, 1, {"unplanned": True})
    books.clock.charge("stall", 10.0)
    assert books.trace_summary()["mean_workers_down"] == pytest.approx(20 / 40)
    Context.membership_event(run, FAIL, 2, {"membership": "torchft", "unplanned": True})  # still down at the end
    books.clock.charge("stall", 10.0)
    assert books.trace_summary()["mean_workers_down"] == pytest.approx(30 / 50)
    healed = Books(SimClock())  # a heal or a resume reads the same books
    healed.keep(trace, method, None)
    healed.load_state_dict(books.state_dict())
    assert healed.trace_summary()["mean_workers_down"] == pytest.approx(30 / 50)


def test_the_replacement_watch_ends_when_the_run_shuts_down():
    """The watch thread reads the coordination store every half second; shutting the membership down
    stops and joins it, so no thread is inside a store call while the interpreter exits (Python
    3.11 ends such a thread with pthread_exit, which aborts the process: pytorch/pytorch#38228)."""
    import datetime
    import time

    from torch.distributed import TCPStore

    from mecefo_exp.tiers.torchft.replaced import ReplacementWatch

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=5))
    m = object.__new__(TorchftMembership)
    m.watch = ReplacementWatch(f"127.0.0.1:{server.port}", 5.0, worker=0, incarnation=0)
    m.manager = types.SimpleNamespace(shutdown=lambda wait: None)
    time.sleep(0.7)  # at least one look at the store
    assert m.watch._thread.is_alive()
    t0 = time.monotonic()
    m.shutdown()
    assert not m.watch._thread.is_alive()
    assert time.monotonic() - t0 < 2.0
