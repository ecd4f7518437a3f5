"""Where the workers run: each tier is one place, found by name, with its own checks; the parts a
run builds once (the books, the checkpoint store, the typed config) stay one thing."""

import ast
import dataclasses

import pytest
from omegaconf import OmegaConf

from conftest import MICRO, ROOT, compose_cfg
from mecefo_exp.config import ClusterConfig, ConfigError, typed_config, validate
from mecefo_exp.registry import TIER_CHECKS, TIERS, tier_class


def _harness_imports(path):
    """The mecefo_exp modules a source file imports (relative imports resolved by their dots)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("mecefo_exp")):
            names.add("." * node.level + (node.module or ""))
    return names


def test_every_cluster_choice_is_a_tier_that_implements_the_protocol():
    from mecefo_exp.tiers import Tier

    allowed = set(next(f for f in dataclasses.fields(ClusterConfig) if f.name == "name").metadata["choices"])
    assert set(TIERS) == allowed
    members = [name for name in vars(Tier) if not name.startswith("_")] + list(Tier.__annotations__)
    for name in TIERS:
        cls = tier_class(name)
        missing = [m for m in members if not hasattr(cls, m) and m not in ("n_workers", "rank", "leader", "kill")]
        assert not missing, (name, missing)
    assert set(TIER_CHECKS) <= set(TIERS)


def test_a_tiers_own_settings_are_checked_by_its_module_before_any_compute(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ConfigError, match="cluster=torchrun needs torchrun"):
        validate(compose_cfg([*MICRO, "cluster=torchrun"]))
    with pytest.raises(ConfigError, match="cluster.n_workers=1 with cluster=torchft"):
        validate(compose_cfg([*MICRO, "cluster=torchft", "cluster.n_workers=1"]))
    # the checks import no tensor library: validating a config must stay quick
    for spec in TIER_CHECKS.values():
        module = ROOT / "mecefo_exp" / "tiers" / (spec.split(":")[0].replace(".", "/") + ".py")
        top_level = [n for n in ast.parse(module.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not any(
            "torch" in ast.unparse(n).split() or "torch" in (getattr(n, "module", "") or "").split(".")
            for n in top_level
        ), module


def test_the_checkpoint_store_is_a_leaf_that_reads_nothing_of_the_run():
    store = ROOT / "mecefo_exp" / "methods" / "checkpointing.py"
    assert _harness_imports(store) == set()
    assert ".run." not in store.read_text().replace("store_of_run", "")


def test_a_stored_config_is_typed_on_the_schemas(tmp_path):
    stored = OmegaConf.to_container(compose_cfg(MICRO), resolve=True)
    del stored["trainer"]["eval_every"]  # a key the schemas gained after the run was written
    stored["trainer"]["max_steps"] = "12"  # YAML written by hand: a number in quotes
    cfg = typed_config(OmegaConf.create(stored))
    assert cfg.trainer.max_steps == 12 and isinstance(cfg.trainer.max_steps, int)
    assert cfg.trainer.eval_every == compose_cfg(["model=llama_tiny"]).trainer.eval_every  # the schema's default
    assert cfg.method.rank == compose_cfg(MICRO).method.rank  # the method's own schema (method=mecefo)

    stored["trainer"]["max_steps"] = "many"
    with pytest.raises(ConfigError) as e:
        typed_config(OmegaConf.create(stored), "run/config.yaml")
    assert "run/config.yaml" in str(e.value) and "trainer.max_steps" in str(e.value) and "\n" not in str(e.value)
    stored["trainer"]["max_steps"] = 12
    stored["method"]["rnak"] = 4
    with pytest.raises(ConfigError, match="method.rnak"):
        typed_config(OmegaConf.create(stored))


def test_the_books_are_built_once_and_live_as_long_as_the_run(tmp_path):
    from mecefo_exp.run.experiment import Experiment

    exp = Experiment(
        compose_cfg([*MICRO, "failure=high", "trainer.max_steps=6", "trainer.numerics=false"]), tmp_path / "run"
    )
    books, counters = exp.books, exp.books.counters
    summary = exp.run()
    assert exp.books is books and exp.books.counters is counters
    assert books.trace is exp.trace and books.method is exp.method
    assert summary["failures"] == counters.failures


def _launcher_of_machine(store, machine: int, machines: int = 2):
    """Just the part of a torchft launcher that speaks with the other machines' launchers, on a real
    coordination store (no torchft, no worker processes)."""
    from mecefo_exp.tiers.torchft.machines import MachinesOfARun

    one = MachinesOfARun()
    one.store, one.machine, one.machines, one.tag = store, machine, machines, f"machine {machine}"
    one.procs, one.incarnation, one.store_lost, one.left_mid_run, one._alive_at = {}, {}, False, False, 0.0
    return one


def test_machine_0_waits_for_a_relaunched_machine_even_after_its_first_launcher_left_mid_run():
    """SLURM preempts machine 1 (SIGTERM: its launcher leaves the run under way), the same command
    brings it back, and its new workers train to the end. Machine 0 must wait for that launcher, not
    take the first one's leaving for the machine's end: it used to stop the store under the second."""
    import threading
    import time

    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = lambda: TCPStore("127.0.0.1", server.port, is_master=False)  # noqa: E731
    machine0, first = _launcher_of_machine(server, 0), _launcher_of_machine(client(), 1)
    first.say_alive()
    first.leave_run()  # stopped by SIGTERM mid-run
    first.leave()  # launch()'s finally calls it on every way out
    second, second_left_at = _launcher_of_machine(client(), 1), []

    def relaunched():  # alive for a while (its workers finish the run), then done
        for _ in range(8):
            second._alive_at = 0.0
            second.say_alive()
            time.sleep(0.2)
        second_left_at.append(time.time())
        second.leave()

    thread = threading.Thread(target=relaunched)
    thread.start()
    machine0.leave()
    returned_at = time.time()
    thread.join()
    assert second_left_at and returned_at >= second_left_at[0], (
        "machine 0 stopped waiting before the relaunched launcher left"
    )


def test_a_machine_refuses_another_runs_coordination_store_and_writes_nothing_into_it(tmp_path, monkeypatch):
    """Two runs given the same cluster.coordinator: run B's machine 0 cannot listen there (run A's
    store does), but B's machine 1 reaches A's store. It must refuse it in one line before it writes
    anything there (it used to adopt A's workers, heal its own into A's quorum and end A's run);
    a machine of A, whose folder holds what A's machine 0 published, joins."""
    from torch.distributed import TCPStore

    from mecefo_exp.tiers.torchft import machines

    monkeypatch.setattr(machines, "SAME_RUN_WAIT_S", 0.3)
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = lambda: TCPStore("127.0.0.1", server.port, is_master=False)  # noqa: E731
    run_a, run_b = tmp_path / "A", tmp_path / "B"
    machine0 = _launcher_of_machine(server, 0)
    machine0.run_dir = run_a
    machine0.publish_run()
    machine0.say_alive()

    def joiner(run_dir):
        one = _launcher_of_machine(client(), 1)
        one.run_dir, one.store_address = run_dir, f"127.0.0.1:{server.port}"
        return one

    keys = server.num_keys()
    for folder_of_b in ("machine 0 never served a store", "a stale identity"):
        if folder_of_b == "a stale identity":  # a run before B in the same folder
            (run_b / "torchft").mkdir(parents=True)
            (run_b / "torchft" / "run-id").write_text("0123abcd\n")
        b = joiner(run_b)
        with pytest.raises(ConfigError) as e:
            b.check_same_run()
        said = str(e.value)
        assert "\n" not in said and "belongs to another run" in said and str(run_a) in said, said
        assert "cluster.coordinator" in said and b.store is None, folder_of_b
        b.leave()  # launch() calls it on every way out: nothing reaches A's store
        assert server.num_keys() == keys, folder_of_b
    a1 = joiner(run_a)
    a1.check_same_run()  # the run's own machine joins
    assert a1.store is not None


class _QuorumOf:
    """A stand-in for torchft's Manager: each quorum shows the processes given for it (worker ->
    incarnation), as the other members' part of the membership all-reduce."""

    def __init__(self, *quorums):
        self.quorums = list(quorums)

    def start_quorum(self):
        self.others = self.quorums.pop(0)

    def errored(self):
        return None

    def allreduce(self, tensor, reduce_op=None):
        import types

        for w, n in self.others.items():
            tensor[w] += n + 1.0
        return types.SimpleNamespace(wait=lambda: None)


def _membership_of(worker: int, incarnations, store, manager):
    import types

    import torch

    from mecefo_exp.tiers.torchft.membership import TorchftMembership

    m = object.__new__(TorchftMembership)
    m.me, m.n, m.joining, m.group, m.store, m.manager = worker, len(incarnations), False, None, store, manager
    m.incarnation, m.restart_timeout_s = dict(enumerate(incarnations)), 300.0
    m.run = types.SimpleNamespace(device=torch.device("cpu"), load_peer_state=lambda *a: None)
    return m


def test_a_replaced_process_back_in_a_quorum_is_not_admitted_and_nobody_waits_for_its_heal():
    """Worker 2 was stopped past the survivors' timeouts; they asked for its process 1 (`restart/2`).
    The old process 0, continued, enters their next quorum first: torchft knows it as worker 2 as it
    would process 1. The survivors must not admit it (they used to, then waited on the heal of
    process 1, which got no quorum, until cluster.restart_timeout_s ended the run): the quorum is
    taken again, and the one without it is theirs at once."""
    import time

    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # a read of a missing key would wait
    server.set("restart/2", "1")
    survivor = _membership_of(0, [0, 0, 1], server, _QuorumOf({1: 0, 2: 0}, {1: 0}))
    started = time.time()
    assert survivor._quorum() == {0, 1}
    assert time.time() - started < 5 and not survivor.manager.quorums
    # process 1 of worker 2 is admitted once it is in a quorum (it said it was up and healed first)
    server.set("ready/2/1", "1.0")
    server.set("heal/2/1", '{"started_at": 0.0, "quorum_and_heal_s": 0.5, "state_bytes": 8}')
    survivor.manager = _QuorumOf({1: 0, 2: 1})
    assert survivor._quorum() == {0, 1, 2}


def test_a_replaced_process_leaves_by_itself_as_a_planned_death_and_a_heal_keeps_its_own_incarnation(monkeypatch):
    """The old process of worker 2, continued after its peers asked for process 1: it leaves before it
    asks for a quorum (SIGKILL of itself, noted as planned: its launcher takes it for no fault), also
    after a heal from a peer, whose books name process 1 for worker 2."""
    from torch.distributed import TCPStore

    from mecefo_exp.tiers.torchft import membership

    killed = []
    monkeypatch.setattr(membership.os, "kill", lambda pid, sig: killed.append(sig))
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    old = _membership_of(2, [0, 0, 0], server, _QuorumOf({0: 0, 1: 0}))
    old.load_state_dict(
        {
            "live": [0, 1],
            "incarnation": {"0": 0, "1": 0, "2": 1},
            "awaiting": {"2": 1.0},
            "replacing": [2],
            "pending": [],
            "leader": 0,
            "real": {},
        }
    )
    assert old.incarnation == {0: 0, 1: 0, 2: 0}  # its own process, not the one the books want
    old._leave_if_replaced()
    assert killed == [] and not server.check(["killed/2/0"])  # nobody asked for another one yet
    server.set("restart/2", "1")
    old._leave_if_replaced()
    assert killed == [membership.signal.SIGKILL] and server.check(["killed/2/0"])


def test_a_torchft_workers_console_gets_one_line_per_record_and_its_log_file_the_traceback():
    """Every worker shares its launcher's console: a failure's traceback goes to the worker's log
    file, the console gets its one line (one failure used to print a traceback per worker)."""
    import logging
    import sys

    from mecefo_exp.torchft_worker import WithoutTraceback

    try:
        raise RuntimeError("torchft: the membership all-reduce failed 5 times")
    except RuntimeError:
        record = logging.LogRecord("w", logging.ERROR, __file__, 1, "worker %d failed", (1,), sys.exc_info())
    fmt = "[worker 1] %(message)s"
    console = WithoutTraceback(fmt).format(record)
    assert console == "[worker 1] worker 1 failed (traceback in its log file)"
    in_file = logging.Formatter(fmt).format(record)  # the same record, after the console's line
    assert in_file.startswith("[worker 1] worker 1 failed\nTraceback") and "membership all-reduce" in in_file
    assert WithoutTraceback(fmt).format(record) == console  # the file's cached traceback stays off the console
