"""The conformance suite of the failure models: every model in `failures.MODELS` is one file with a
`check` and a `make`, refuses a broken setting in one line, and makes a trace that depends on the
seed and the time base only (common random numbers: the method never enters)."""

import ast
import math
from pathlib import Path

import pytest

from conftest import ROOT, compose_cfg
from mecefo_exp.failures import MODELS, Trace, check_failure, make_trace, model

#: a preset (and the overrides it needs) of every failure kind
PRESET = {
    "none": ["failure=none"],
    "paper": ["failure=high"],
    "poisson": ["failure=poisson"],
    "field": ["failure=llama3_taxonomy"],
    "trace": ["failure=trace"],
    "nodes": ["failure=nodes", "failure.path=conf/failure/traces/oobleck_artifact/1h.csv"],
}
#: a setting each model must refuse, and a word its one line must hold
BROKEN = {
    "paper": ("every_h", -1.0, "every_h"),
    "poisson": ("mtbf", 0.0, "mtbf"),
    "field": ("name", "llama4", "allowed"),
    "trace": ("path", None, "failure.path"),
    "nodes": ("path", None, "failure.path"),
}


def test_every_kind_of_the_schema_is_a_registered_model_and_every_model_has_a_preset():
    import dataclasses

    from mecefo_exp.config import FailureConfig

    kind = next(f for f in dataclasses.fields(FailureConfig) if f.name == "kind")
    assert set(kind.metadata["choices"]) == set(MODELS)
    assert set(PRESET) == set(MODELS)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_model_is_one_file_with_check_and_make(kind):
    module = model(kind)
    path = Path(module.__file__)
    assert path.parent == ROOT / "mecefo_exp" / "failures", path
    defined = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert {"check", "make"} <= defined, (kind, defined)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_model_s_settings_are_its_own_file_s_config_and_its_preset_composes_onto_it(kind, tmp_path):
    from omegaconf import OmegaConf

    from mecefo_exp.config import FailureConfig
    from mecefo_exp.failures import failure_config

    config = failure_config(kind)
    assert issubclass(config, FailureConfig)
    assert config is FailureConfig or config.__module__ == model(kind).__name__, (kind, config)
    overrides = PRESET[kind] + (["failure.path=t.csv"] if kind == "trace" else [])
    assert OmegaConf.get_type(compose_cfg(overrides).failure) is config


def test_a_setting_of_another_failure_kind_is_refused_in_one_line(tmp_path):
    """`failure.mtbf` means nothing to the paper's rates: it is refused, not silently ignored."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "run.py", "failure=high", "failure.mtbf=3", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-2000:]
    assert "failure.mtbf" in out.stderr and "every_h" in out.stderr  # what is wrong, and what is allowed


def test_a_folder_of_an_older_version_drops_the_other_kinds_settings():
    """Before each kind had its own settings, a run folder stored every kind's (at their defaults)."""
    from omegaconf import OmegaConf

    from mecefo_exp.config.schema import typed_config

    old = OmegaConf.create(OmegaConf.to_container(compose_cfg(["failure=high"]), resolve=False))
    old.failure.update({"mtbf": None, "mttr": None, "path": None, "node_ready_s": 45.0, "job_faults": {}})
    typed = typed_config(old)
    assert "mtbf" not in typed.failure and typed.failure.every_h == old.failure.every_h
    assert typed.failure.name == "high" and typed.failure.kind == "paper"  # the shared settings stay


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "t.csv"
    path.write_text("time,worker,event\n0.5,1,fail\n2.0,1,recover\n3.0,job,fail\n3.0,job,recover\n")
    return path


def failure_of(kind, trace_file, *more):
    overrides = PRESET[kind] + list(more)
    if kind == "trace":
        overrides += [f"failure.path={trace_file}", "failure.unit=seconds"]
    f = compose_cfg(overrides).failure
    if kind == "nodes":
        f.path = str(ROOT / f.path)
    return f


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_valid_preset_passes_its_check_and_makes_a_trace_of_the_seed_alone(kind, trace_file):
    f = failure_of(kind, trace_file)
    n = {"nodes": 32, "field": 16384}.get(kind, 16)  # field: Llama 3's cluster over a day
    steps, real_time = (86400, True) if kind == "field" else (2000, False)
    assert check_failure(f, n) is None
    a = make_trace(f, n, 1.0, steps, seed=3, real_time=real_time)
    b = make_trace(f, n, 1.0, steps, seed=3, real_time=real_time)
    assert isinstance(a, Trace) and a.events == b.events
    assert [e.time for e in a.events] == sorted(e.time for e in a.events)
    assert set(a.expected) >= {"failures", "unit_failures", "mean_workers_down"}
    assert all(e.kind in ("fail", "recover") for e in a.events)
    if kind in ("paper", "poisson", "field"):  # drawn: another seed, another trace
        assert a.events and a.events != make_trace(f, n, 1.0, steps, seed=4, real_time=real_time).events
        assert math.isfinite(a.expected["failures"])


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_setting_is_one_line_naming_it(kind, trace_file):
    key, value, word = BROKEN[kind]
    f = failure_of(kind, trace_file)
    setattr(f, key, value)
    problem = check_failure(f, 16)
    assert problem and "\n" not in problem and word in problem, problem
