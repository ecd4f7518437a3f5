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
        assert not any("torch" in ast.unparse(n).split() or "torch" in (getattr(n, "module", "") or "").split(".")
                       for n in top_level), module


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
    from mecefo_exp.trainer import Experiment

    exp = Experiment(compose_cfg([*MICRO, "failure=high", "trainer.max_steps=6", "trainer.numerics=false"]),
                     tmp_path / "run")
    books, counters = exp.books, exp.books.counters
    summary = exp.run()
    assert exp.books is books and exp.books.counters is counters
    assert books.trace is exp.trace and books.method is exp.method
    assert summary["failures"] == counters.failures
