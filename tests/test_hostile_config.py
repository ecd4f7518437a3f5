"""Hostile settings are one line before anything runs: a seed outside what the generators take,
and a personal settings file (conf/local/<name>.yaml) that is not YAML, also for --help and sweeps."""

import subprocess
import sys
import uuid

import pytest

from conftest import MICRO, ROOT, compose_cfg


@pytest.mark.parametrize("seed", [2**64, 2**63 - 1, 2**63, 2**32, -1])
def test_a_seed_out_of_range_is_one_line(seed):
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match=rf"^seed={seed}: must be a whole number in 0\.\.4,294,967,295"):
        validate(compose_cfg([*MICRO, f"seed={seed}"]))


def test_the_largest_seed_runs(run_exp):
    summary, _ = run_exp("seed=4294967295", "trainer.max_steps=1", "trainer.eval_every=0", "failure=none")
    assert summary["status"] == "ok"


def test_a_huge_seed_on_the_command_line_is_one_line_and_no_traceback(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            "experiment=debug",
            "seed=18446744073709551616",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == "config error: seed=18446744073709551616: must be a whole number in 0..4,294,967,295 (2^32 - 1)"
    )


@pytest.fixture
def broken_local():
    """conf/local/<unique>.yaml with an unclosed `[` on line 2 (removed afterwards)."""
    name = f"broken_{uuid.uuid4().hex[:8]}"
    path = ROOT / "conf" / "local" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("trainer:\n  max_steps: [1, 2\n")
    yield name, path
    path.unlink()


@pytest.mark.parametrize("how", ["run", "sweep", "help"])
def test_a_malformed_personal_settings_file_is_one_line_naming_file_line_and_column(tmp_path, broken_local, how):
    name, path = broken_local
    args = {
        "run": ["experiment=debug", f"hydra.run.dir={tmp_path / 'run'}"],
        "sweep": ["-m", "experiment=debug", "method=checkpoint,mecefo", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        "help": ["--help"],
    }[how]
    out = subprocess.run(
        [sys.executable, "run.py", f"local={name}", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert lines[0].startswith(f"config error: {path} line 2, column 14: while parsing a flow sequence"), lines[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
