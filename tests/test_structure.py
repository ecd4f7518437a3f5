"""The trainer's seams: methods see only RunContext, and old run folders still resume.

- A static read of the sources finds no `run.` member that RunContext (methods/base.py) does not
  declare in the methods, the checkpoint store or the torchft membership; every method also runs
  against a strict proxy of the run that refuses any other (tests/test_conformance.py).
- A run folder written by the trainer before it was taken apart into components
  (tests/fixtures/run_before_restructuring: checkpoint-restart under failure=high, checkpoint at
  step 4, before three failures) resumes to the same losses, clock and counters as that
  uninterrupted run.
"""

import ast
import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, losses_by_step, run_py
from mecefo_exp.methods.run_context import run_context_members

MEMBERS = run_context_members()
FIXTURE = ROOT / "tests" / "fixtures" / "run_before_restructuring"


def _run_members_read(path: Path) -> set:
    """Attribute names read or written on `run` / `self.run` in one source file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "run") or (
                isinstance(owner, ast.Attribute)
                and owner.attr == "run"
                and isinstance(owner.value, ast.Name)
                and owner.value.id == "self"
            ):
                names.add(node.attr)
    return names


def test_methods_stores_and_the_membership_name_only_declared_members():
    pkg = ROOT / "mecefo_exp"
    files = sorted((pkg / "methods").glob("*.py")) + [pkg / "tiers" / "torchft" / "membership.py"]
    undeclared = {f.name: sorted(_run_members_read(f) - MEMBERS) for f in files}
    assert not any(undeclared.values()), undeclared
    assert "restore" in _run_members_read(pkg / "methods" / "checkpointed.py")  # the reader sees real uses


@pytest.mark.slow  # run.py resumes a run folder (~12 s): `make test-crash`
def test_a_run_folder_written_before_the_restructuring_still_resumes_exactly(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir, ignore=shutil.ignore_patterns("expected.json"))
    expected = json.loads((FIXTURE / "expected.json").read_text())
    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["resumes"][0]["from_step"] == 4
    for key in ("steps", "failures", "rollbacks", "lost_steps"):
        assert summary[key] == expected[key], key
    assert summary["sim_time_s"] == pytest.approx(expected["sim_time_s"], rel=1e-12)
    assert summary["final_val_loss"] == pytest.approx(expected["final_val_loss"], rel=1e-6)
    losses = losses_by_step(run_dir)
    assert [losses[s] for s in sorted(losses)] == pytest.approx(expected["losses"], rel=1e-6)


def test_the_flop_cache_key_hashes_what_counting_imports_and_follows_a_rename(tmp_path):
    from mecefo_exp.timing import counting_sources

    reached = set(counting_sources())
    # what the count runs through: the counter, its kernels, the model, MeCeFO's approximations
    assert {
        "timing/flops.py",
        "timing/kernels.py",
        "numerics/approx.py",
        "numerics/executor.py",
        "numerics/model.py",
        "methods/mecefo.py",
        "methods/bamboo.py",
        "plan.py",
        "numerics/optim.py",
    } <= reached
    # the loop and the corpus are not counted
    assert not {"run/loop.py", "run/experiment.py", "data.py"} & reached

    pkg = tmp_path / "pkg"
    (pkg / "timing").mkdir(parents=True)
    (pkg / "methods").mkdir()
    (pkg / "timing" / "__init__.py").write_text("")
    (pkg / "timing" / "flops.py").write_text("from ..helpers import f\n")
    (pkg / "timing" / "kernels.py").write_text("from .. import model\n")
    (pkg / "model.py").write_text("")
    (pkg / "methods" / "mine.py").write_text("import os\nfrom ..plan import Plan\n")
    (pkg / "plan.py").write_text("")
    (pkg / "helpers.py").write_text("from .deep import g\n")
    (pkg / "deep.py").write_text("g = 1\n")
    (pkg / "unrelated.py").write_text("")
    assert set(counting_sources(pkg)) == {
        "timing/__init__.py",
        "timing/flops.py",
        "timing/kernels.py",
        "model.py",
        "methods/mine.py",
        "plan.py",
        "helpers.py",
        "deep.py",
    }
    (pkg / "deep.py").rename(pkg / "deeper.py")  # a rename follows the code instead of crashing
    (pkg / "helpers.py").write_text("from .deeper import g\n")
    assert "deeper.py" in counting_sources(pkg) and "deep.py" not in counting_sources(pkg)


def test_every_field_rule_is_enforced_with_one_line_naming_the_field():
    import copy
    import dataclasses

    from omegaconf import OmegaConf

    from conftest import compose_cfg
    from mecefo_exp.config import (
        ClusterConfig,
        ConfigError,
        DataConfig,
        FailureConfig,
        HardwareConfig,
        LoggerConfig,
        ModelConfig,
        ParallelConfig,
        TrainerConfig,
        validate,
    )
    from mecefo_exp.failures import MODELS, failure_config

    default = compose_cfg([])  # composed once: each rule is checked on a copy with one bad value
    # a failure model's own settings, on a config of its kind (composed once per kind that has rules)
    of_kind = {
        "nodes": compose_cfg(["failure=nodes", f"failure.path={ROOT / 'conf/failure/traces/oobleck_artifact/1h.csv'}"])
    }
    own = [
        (kind, f)
        for kind in MODELS
        for f in dataclasses.fields(failure_config(kind))
        if f.metadata and f.name not in {g.name for g in dataclasses.fields(FailureConfig)}
    ]
    assert {kind for kind, _ in own} <= set(of_kind), f"a failure kind with rules and no config here: {own}"
    checked = 0
    sections = [
        (section, f, default)
        for section, schema in (
            ("model", ModelConfig),
            ("data", DataConfig),
            ("cluster", ClusterConfig),
            ("trainer", TrainerConfig),
            ("logger", LoggerConfig),
            ("failure", FailureConfig),
            ("hardware", HardwareConfig),
            ("parallel", ParallelConfig),
        )
        for f in dataclasses.fields(schema)
    ] + [("failure", f, of_kind[kind]) for kind, f in own]
    for section, f, default in sections:
        rule = f.metadata
        if not rule:
            continue
        if "choices" in rule:
            bad = "not_an_option"
        elif "ge" in rule:
            bad = rule["ge"] - 1
        elif "gt" in rule:
            bad = rule["gt"]
        else:
            bad = rule["within"][1] + 1
        cfg = copy.deepcopy(default)
        OmegaConf.update(cfg, f"{section}.{f.name}", bad, force_add=True)
        with pytest.raises(ConfigError) as e:
            validate(cfg)
        assert str(e.value).startswith(f"{section}.{f.name}=") and "\n" not in str(e.value), str(e.value)
        checked += 1
    assert checked >= 45


def test_every_module_is_on_the_map():
    """docs/MAP.md has one line per module of the package, and names no file that is gone."""
    import re

    listed = set(re.findall(r"^\| `(mecefo_exp/[\w/]+\.py)` \|", (ROOT / "docs" / "MAP.md").read_text(), re.M))
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "mecefo_exp").rglob("*.py")}
    assert modules - listed == set(), f"modules missing from docs/MAP.md: {sorted(modules - listed)}"
    assert listed - modules == set(), f"docs/MAP.md lists files that do not exist: {sorted(listed - modules)}"


def _method_family_hooks_overridden() -> list:
    """The names `Method` and its three families define that a method overrides (a family
    overriding `Method`'s name counts too): what the author of a new method has to read."""
    import importlib
    import pkgutil

    import mecefo_exp.replay
    from mecefo_exp.methods import REGISTRY, method_class
    from mecefo_exp.methods.base import Method
    from mecefo_exp.methods.checkpointed import CheckpointedMethod
    from mecefo_exp.methods.in_place import InPlaceMethod
    from mecefo_exp.methods.rollback import RollbackMethod

    for name in REGISTRY:
        method_class(name)
    for module in pkgutil.iter_modules(mecefo_exp.replay.__path__):  # the replay's method variants
        importlib.import_module(f"mecefo_exp.replay.{module.name}")
    families = (Method, CheckpointedMethod, RollbackMethod, InPlaceMethod)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    methods = {c for c in subclasses(Method) if c not in families and c.__module__.startswith("mecefo_exp.")}
    defined = {k for family in families for k in vars(family) if not k.startswith("__")}
    return sorted(
        k
        for k in defined
        if any(k in vars(m) for m in methods) or any(k in vars(f) and k in vars(Method) for f in families[1:])
    )


def test_the_method_family_s_overridable_names_are_as_docs_architecture_says():
    """docs/ARCHITECTURE.md states how many names a method may override; the count can only fall
    (a new hook must take an old one's place)."""
    import re

    names = _method_family_hooks_overridden()
    assert "on_failures" in names and "plan" in names  # the reader sees real overrides
    stated = re.search(r"overridable names are (\d+)", (ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert stated is not None, "docs/ARCHITECTURE.md no longer states the count"
    assert len(names) == int(stated.group(1)), (
        f"{len(names)} names, docs/ARCHITECTURE.md says {stated.group(1)}: {names}"
    )
    assert len(names) <= 30, f"the method family grew to {len(names)} overridable names: {names}"
