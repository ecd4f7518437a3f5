"""Plans that name only the workers that differ, checked against the dense computation.

A numerics-free run reads of a plan only what the clock needs (the computing count, the workers
that do more or other work), in time proportional to what changed; MeCeFO's cover, Bamboo's ring
and the re-split deal are kept between events instead of being rebuilt over every worker. On
generated cases (random cluster sizes, failure rates and seeds, every registered method) each
plan's sparse answers must equal those computed from its full per-worker work, and Bamboo's ring
(its deal at a rebalance, its redundant forward) must equal the dense algorithm over every worker.
"""

import random

import pytest

from conftest import compose_cfg
from mecefo_exp.methods import REGISTRY, method_class
from mecefo_exp.methods import bamboo as bamboo_module
from mecefo_exp.plan import Plan
from mecefo_exp.run.experiment import Experiment

SHAPE = [
    "model=llama_350m",
    "model.vocab_size=512",
    "hardware=a100_32",
    "hardware.paper_time=scaled",
    "data.micro_batch=8",
    "data.seq_len=256",
    "trainer.numerics=false",
    "trainer.max_steps=200",
    "trainer.eval_every=0",
    "trainer.progress=none",
    "trainer.log_events=0",
]


def generated_cases(count=2, seed=0):
    """(workers, failure rate x the paper's high, seed): small clusters where neighbours collide often."""
    rng = random.Random(seed)
    return [(rng.choice([3, 5, 8, 13, 24]), rng.choice([2.0, 4.0, 8.0]), rng.randrange(100)) for _ in range(count)]


def dense_answers(plan):
    """What the clock reads, computed from the full per-worker work."""
    dense = Plan(plan.step, {w: list(items) for w, items in plan.work.items()})
    return dense.n_computing, dense.special_modes(), dense.first_normal_worker(), list(dense.computing_workers)


def dense_redundant_forward_s(method, plan):
    """Bamboo's eager redundant forward over every worker of the ring (the algorithm before it was
    kept sparse): each computing worker shadows its ring predecessor's micro-batches."""
    costs = method.run.costs
    forward = costs.profile["mb:forward"]
    ring = [w for w in range(method.n) if w not in method.left_out]
    modes = plan.worker_modes()
    slowest = max(costs.worker_s(m) for m in modes.values())
    extra = 0.0
    for w, m in modes.items():
        pred = ring[(ring.index(w) - 1) % len(ring)]
        if pred == w or pred in method.down:
            continue
        extra = max(extra, len(method._owners(pred)) * forward - (slowest - costs.worker_s(m)))
    return extra


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_sparse_plans_equal_the_dense_ones_on_generated_cases(method, tmp_path, monkeypatch):
    checked = {"plans": 0, "degraded": 0, "forward": 0}
    cls = method_class(method)
    original_plan = cls.plan

    def checked_plan(self, step):
        plan = original_plan(self, step)
        n_computing, special, first_normal, computing = dense_answers(plan)
        assert plan.n_computing == n_computing, (step, plan.n_computing, n_computing)
        assert plan.special_modes() == special, step
        assert plan.first_normal_worker() == first_normal, step
        assert list(plan.computing_workers) == computing, step
        if method == "bamboo" and self.layout is None and n_computing:  # the ring
            assert plan.degraded == any(len(items) > 1 for items in plan.work.values()), step
            assert self.redundant_forward_s() == dense_redundant_forward_s(self, plan), step
            checked["forward"] += 1
        checked["plans"] += 1
        checked["degraded"] += bool(plan.degraded)
        return plan

    monkeypatch.setattr(cls, "plan", checked_plan)
    # a rollback method's plans degrade only when it restarts on the survivors (its sparse re-split)
    variant = ["method.restart_on=survivors"] if "restart_on" in compose_cfg([f"method={method}"]).method else []
    for i, (workers, rate, seed) in enumerate(generated_cases()):
        cfg = compose_cfg(
            SHAPE
            + [
                f"method={method}",
                "failure=high",
                f"failure.every_h={0.5 / rate}",
                f"cluster.n_workers={workers}",
                f"seed={seed}",
            ]
            + variant
        )
        Experiment(cfg, tmp_path / f"case{i}").run()
    assert checked["plans"] > 0, checked
    if method != "baft":  # BAFT restarts on spares only: its plans never degrade
        assert checked["degraded"] > 0, checked  # the cases reach degraded plans
    if method == "bamboo":
        assert checked["forward"] > 0


def test_bamboo_deal_is_the_least_loaded_nearest_successor():
    """At a rebalance each down worker's micro-batch goes to the alive worker with the fewest, the
    nearest after it on the ring among equals: the sparse deal against the dense one."""
    rng = random.Random(1)
    for _ in range(400):
        n = rng.randrange(2, 40)
        down = set(rng.sample(range(n), rng.randrange(0, n)))
        alive = [w for w in range(n) if w not in down]
        full = {w: [w] for w in alive}
        for orphan in sorted(down):
            target = min(alive, key=lambda w: (len(full[w]), (w - orphan) % n))
            full[target].append(orphan)
        assert bamboo_module._deal(n, down) == {w: o for w, o in full.items() if len(o) > 1}, (n, sorted(down))


def test_a_data_parallel_step_counts_the_helpers_without_walking_them():
    """MeCeFO hands the clock its cover's view: the data-parallel clock must read how many help,
    never who (a walk made a 65,536-worker run 27x slower per event)."""
    from types import SimpleNamespace

    from mecefo_exp.timing.clocks import DataParallelSteps
    from mecefo_exp.timing.steps import Help

    class Counted:
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __iter__(self):
            raise AssertionError("the clock walked the helpers")

    class Costs:
        profile = {"pair": 2.5, "mb:normal": 1.0}

        def worker_s(self, modes):
            return 1.0 * len(modes)

        def synchronous_step(self, slowest_s, microbatches, n_allreduce, ft_overhead=0.0):
            return slowest_s, microbatches, n_allreduce, ft_overhead

    steps = DataParallelSteps(Costs())
    pair = Help(kernel="pair", microbatches=2)
    assert steps.helped(SimpleNamespace(n_computing=60_000), {pair: Counted(5_000)}, 65_536, 0.5, None) == (
        2.5,
        2,
        60_000,
        0.5,
    )
    Costs.profile["pair"] = 0.5  # a pair faster than a normal micro-batch: a worker that helps nobody is the slowest
    assert steps.helped(SimpleNamespace(n_computing=60_000), {pair: Counted(5_000)}, 65_536, 0.0, None)[:2] == (1.0, 1)
    assert steps.helped(SimpleNamespace(n_computing=5_000), {pair: Counted(5_000)}, 65_536, 0.0, None)[:2] == (0.5, 2)
