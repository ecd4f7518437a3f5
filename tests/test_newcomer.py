"""What a newcomer meets first, checked as they meet it: `make setup`'s output and its
TORCH_SPEC, the SLURM scripts' CPUs, the one-line errors, and nothing left in their runs/."""

import os
import re
import subprocess
import sys

import tomllib

from conftest import ROOT, run_py


def test_every_conf_folder_with_configs_is_a_listed_package():
    """setuptools warns (40 lines each) about every package-data folder that is not a package."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(project["packages"])
    for folder in sorted(p for p in (ROOT / "conf").rglob("*") if p.is_dir() and p.name != "local"):
        if any(f.suffix in (".yaml", ".csv") for f in folder.iterdir()):
            name = "mecefo_exp." + ".".join(folder.relative_to(ROOT).parts)
            assert name in packages, f"pyproject.toml: {name} is missing from [tool.setuptools] packages"
            assert name in project["package-data"], f"pyproject.toml: no package-data for {name}"


def test_every_python_package_folder_is_a_listed_package():
    """A package missing from the list is missing from the wheel: the installed harness fails at
    its first import of it (a stale build/ folder in a checkout can hide that from the wheel test)."""
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for top in ("mecefo_exp", "hydra_plugins"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            name = ".".join(init.parent.relative_to(ROOT).parts)
            if "__pycache__" not in name and (top != "hydra_plugins" or name != "hydra_plugins"):
                assert name in packages, f"pyproject.toml: {name} is missing from [tool.setuptools] packages"


def test_building_the_package_prints_no_setuptools_warning(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    warnings = [line for line in (out.stdout + out.stderr).splitlines() if re.search(r"[a-z]Warning\b|!!", line)]
    assert warnings == [], "\n".join(warnings[:10])


def _fake_venv(tmp_path, spec):
    """A .venv whose python logs its arguments: what `make` would install, nothing installed."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls.log"
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/bash\necho "$*" >> {log}\n')
    python.chmod(0o755)
    (venv / ".torch-spec").write_text(spec + "\n")
    (venv / ".installed").touch()
    return venv, log


def _make(venv, *args):
    return subprocess.run(
        ["make", "-s", f"VENV={venv}", f"{venv}/.installed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_setup_with_another_torch_spec_reinstalls_torch(tmp_path):
    default = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    venv, log = _fake_venv(tmp_path, default)
    out = _make(venv)
    assert out.returncode == 0, out.stderr
    calls = log.read_text() if log.exists() else ""
    assert "--force-reinstall" not in calls  # the same spec: torch stays
    cuda = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    out = _make(venv, f"TORCH_SPEC={cuda}")
    assert out.returncode == 0, out.stderr
    calls = log.read_text()
    assert f"-m pip install -q --no-deps --force-reinstall {cuda}" in calls
    assert "-m pip install -q -c constraints.txt torch -r requirements.txt" in calls  # and torch's dependencies
    assert (venv / ".torch-spec").read_text().strip() == cuda


def test_the_default_torch_spec_names_the_cpu_build():
    spec = re.search(r"^TORCH_SPEC \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)[1]
    assert spec.startswith("torch==2.13.0") and "download.pytorch.org/whl/cpu" in spec


def test_the_sbatch_scripts_hand_their_cpus_to_srun(tmp_path):
    """Slurm 22.05 and later: srun does not inherit --cpus-per-task; SRUN_CPUS_PER_TASK carries it."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/bash\nprintf "SRUN_CPUS_PER_TASK=%s\\n" "$SRUN_CPUS_PER_TASK"\n')
    srun.chmod(0o755)
    for script in ("scripts/sbatch_torchrun.sh", "scripts/sbatch_torchft.sh"):
        asked = re.search(r"#SBATCH --cpus-per-task=(\d+)", (ROOT / script).read_text())[1]
        env = {k: v for k, v in os.environ.items() if k != "MECEFO_CACHE"}
        env.update(
            SLURM_NNODES="2",
            SLURM_JOB_NUM_NODES="2",
            SLURM_JOB_ID="1",
            SLURM_CPUS_PER_TASK=asked,
            PATH=f"{tmp_path}:{env['PATH']}",
        )
        out = subprocess.run(
            ["bash", script, "method=mecefo"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert f"SRUN_CPUS_PER_TASK={asked}" in out.stdout.splitlines(), (script, out.stdout)


def test_a_command_that_only_prints_leaves_no_folder(tmp_path):
    """`run.py ... --cfg job hydra.run.dir=D` shows the config; it neither creates D nor locks it."""
    folder = tmp_path / "would_be_run"
    out, _ = run_py("method=bamboo", f"hydra.run.dir={folder}", "--cfg", "job")
    assert out.returncode == 0, out.stderr
    assert "name: bamboo" in out.stdout
    assert not folder.exists()


def test_a_misspelt_option_gets_a_suggestion():
    from mecefo_exp.cli.preflight import check_overrides

    problem = check_overrides(["failure=hgh"])
    assert "(did you mean high?)" in problem and "\n" not in problem
    assert "allowed: " in problem


def test_a_study_run_without_multirun_says_it_runs_one_cell():
    from mecefo_exp.cli.preflight import one_cell_note

    note = one_cell_note(["experiment=decision_map"])
    assert "one cell" in note and "make decision-map" in note and "1,008 runs" in note
    assert "python run.py -m experiment=paper_table2" in one_cell_note(["experiment=paper_table2"])
    assert one_cell_note(["-m", "experiment=paper_table2"]) is None
    assert one_cell_note(["experiment=debug"]) is None and one_cell_note(["method=jit"]) is None


def test_make_results_says_what_it_did_not_regenerate(tmp_path, monkeypatch, capsys):
    from analysis import published

    note = published.not_regenerated_note(["paper_mini"])
    assert "study decision_map" in note and "study paper_table2" in note and "study paper_mini" not in note
    assert "Table 3" in note and "make oobleck-artifact" in note
    assert "study" not in published.not_regenerated_note(list(published.STUDIES)).split("\n", 2)[1]
    # the command prints it after the comparison (a finished sweep stands in for the runs)
    monkeypatch.setattr(
        published, "regenerate", lambda study, out, given=None: ({}, published.Fingerprints("d", "c", {}))
    )
    monkeypatch.setattr(published, "check", lambda text, tables, prints: True)
    assert published.main(["regenerate", "paper_mini", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("identical to RESULTS.md") < out.index("not regenerated by this command:")


def test_make_paper_mini_collects_its_own_sweep_only():
    recipe = (ROOT / "Makefile").read_text().split("\npaper-mini: setup\n", 1)[1].split("\n\n", 1)[0]
    assert "-m analysis $$sweep" in recipe and "analysis runs/sweeps " not in recipe
