"""An installable package: the console script, a self-contained wheel, dependency lists that agree."""

import os
import re
import subprocess
import sys
import zipfile

import pytest
import tomllib
import yaml

from conftest import MICRO, ROOT


def _pins(path):
    """name -> version of a requirements file (comments and blank lines skipped)."""
    out = {}
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[_norm(name)] = version
    return out


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(spec):
    return _norm(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0])


def test_dependency_lists_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, optional, test, lint = (
        _pins("requirements.txt"),
        _pins("requirements-optional.txt"),
        _pins("requirements-test.txt"),
        _pins("requirements-lint.txt"),
    )
    constraints = _pins("constraints.txt")
    torch_pin = constraints["torch"]
    # pyproject: runtime dependencies = requirements.txt (+ torch, installed first); extras = the optional files
    assert {_name(d) for d in project["dependencies"]} == set(runtime) | {"torch"}
    extras = project["optional-dependencies"]
    assert {_name(d) for k, v in extras.items() if k not in ("test", "lint") for d in v} == set(optional)
    assert {_name(d) for d in extras["test"]} == set(test)
    assert {_name(d) for d in extras["lint"]} == set(lint)  # `make lint` installs it; environment.yml leaves it out
    assert "pytest" not in runtime  # not a runtime requirement
    # environment.yml: the same pins, every one of them
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_pins = dict((_norm(p.split("==")[0]), p.split("==")[1]) for p in pip if "==" in p)
    # each package pinned in one file
    assert not set(constraints) & (set(runtime) | set(optional) | set(test) | set(lint))
    assert conda_pins == {**runtime, **optional, **test, **constraints}
    assert f"TORCH_SPEC ?= torch=={torch_pin}" in (ROOT / "Makefile").read_text()


def test_every_package_the_default_corpus_depends_on_is_pinned_at_its_reference_version():
    """The default corpus reads the docstrings of several packages (and tokenizes with another):
    each one unpinned could come in another version on a fresh install and change the corpus's
    fingerprint. requirements.txt or constraints.txt (both installed by `make setup`) pins each."""
    from mecefo_exp import local_corpus

    pins = {**_pins("requirements.txt"), **_pins("constraints.txt")}
    wanted = {_norm(name): version for name, version in local_corpus.REFERENCE_VERSIONS.items()}
    assert set(local_corpus.DOCSTRING_PACKAGES) <= set(local_corpus.REFERENCE_VERSIONS)
    assert {name: pins.get(name) for name in wanted} == wanted


def _run(args, cwd, env_extra=None, timeout=180):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env_extra or {})}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def _entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts["mecefo-exp"].partition(":")
    return f"import sys; sys.argv[0] = 'mecefo-exp'; from {module} import {func}; {func}()"


@pytest.mark.slow  # two processes of the installed entry point (~15 s): `make test-cli`
def test_console_script_help_and_a_two_step_run_from_another_folder(tmp_path):
    """The entry point pyproject installs as `mecefo-exp`, started outside the checkout."""
    code = _entry_point()
    env = {"PYTHONPATH": str(ROOT)}
    out = _run([sys.executable, "-c", code, "--help"], tmp_path, env)
    assert out.returncode == 0, out.stderr[-2000:]
    from mecefo_exp.registry import REGISTRY

    assert "method: " + ", ".join(sorted(REGISTRY)) in out.stdout
    assert "schema/" not in out.stdout  # internal groups stay out of --help
    steps = [o for o in MICRO if not o.startswith(("trainer.max_steps", "trainer.eval_every"))]
    out = _run(
        [
            sys.executable,
            "-c",
            code,
            *steps,
            "trainer.max_steps=2",
            "trainer.eval_every=0",
            "failure=none",
            "hydra.run.dir=r",
        ],
        tmp_path,
        env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert '"status": "ok"' in (tmp_path / "r" / "summary.json").read_text()
    assert "mecefo-exp resume=true \"hydra.run.dir='r'\"" in out.stderr + out.stdout


@pytest.mark.slow
def test_the_wheel_is_self_contained(tmp_path):
    """Build the wheel, install it into a folder and run it from there, without the checkout."""
    out = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("mecefo_exp-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {
        "mecefo_exp",
        "hydra_plugins",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    assert "mecefo_exp/conf/config.yaml" in names and "mecefo_exp/conf/hydra/launcher/slurm.yaml" in names
    assert "mecefo_exp/analysis/callback.py" in names and not any(n.startswith("analysis/") for n in names)
    target = tmp_path / "site"
    out = _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # a cache of its own, without data.cache_dir: the installed package must find and fill it
    # ($MECEFO_CACHE), never its site-packages folder; the Lee corpus and the FLOP counts are
    # borrowed from the checkout so that nothing is downloaded or counted again
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("corpus", "flops"):
        (cache / name).symlink_to(ROOT / ".cache" / name, target_is_directory=True)
    env = {"PYTHONPATH": str(target), "MECEFO_CACHE": str(cache)}
    run = tmp_path / "elsewhere"
    run.mkdir()
    where = _run([sys.executable, "-c", "import mecefo_exp; print(mecefo_exp.__file__)"], run, env)
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr  # the installed copy, not the checkout
    steps = [o for o in MICRO if not o.startswith(("trainer.max_steps", "trainer.eval_every"))]
    # a one-job sweep: configs from the wheel, and the collect callback through mecefo_exp.analysis
    out = _run(
        [
            sys.executable,
            "-m",
            "mecefo_exp",
            "-m",
            *steps,
            "trainer.max_steps=2",
            "trainer.eval_every=0",
            "failure=none",
            "method=checkpoint",
            "hydra.sweep.dir=s",
        ],
        run,
        env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summaries = list((run / "s").rglob("summary.json"))
    assert len(summaries) == 1 and '"status": "ok"' in summaries[0].read_text()
    assert (run / "s" / "analysis" / "runs.csv").exists()
    assert list((cache / "data").glob("local-*/train.npy")), "the tokens were not cached under $MECEFO_CACHE"
    assert not list(target.rglob(".cache")), "the installed package wrote a cache inside site-packages"
