"""tests/runs_guard.py: a pytest session that leaves new files under runs/ fails, with and without
pytest-xdist; what was there before the session, and a session that writes nothing, pass."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

CONFTEST = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import runs_guard
runs_guard.RUNS = Path(__file__).parent / "runs"
from runs_guard import pytest_sessionfinish, pytest_sessionstart
"""

# two tests, so that under -n 2 each worker runs one; WRITE names the ones that write
TESTS_FILE = """
import os
from pathlib import Path

RUNS = Path(__file__).parent / "runs"


def test_a():
    if "a" in os.environ.get("WRITE", ""):
        (RUNS / "2026-01-01" / "12-00-00.000000_by_a").mkdir(parents=True)
        (RUNS / "2026-01-01" / "12-00-00.000000_by_a" / "summary.json").write_text("{}")


def test_b():
    if "b" in os.environ.get("WRITE", ""):
        (RUNS / "by_b.txt").write_text("x")
"""


def _pytest(folder, write, *args):
    env = {**os.environ, "WRITE": write}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture
def project(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST.format(tests=str(TESTS)))
    (tmp_path / "test_write.py").write_text(TESTS_FILE)
    (tmp_path / "runs" / "old").mkdir(parents=True)
    (tmp_path / "runs" / "old" / "summary.json").write_text("{}")  # there before: not the tests'
    return tmp_path


def test_a_session_that_leaves_runs_fails_and_names_them(project):
    out = _pytest(project, "ab")
    assert out.returncode == 1, out.stdout[-2000:]
    assert "2 passed" in out.stdout and "runs/ is not as the tests found it" in out.stdout
    assert "runs/2026-01-01/12-00-00.000000_by_a/summary.json" in out.stdout and "runs/by_b.txt" in out.stdout
    assert "runs/old" not in out.stdout


@pytest.mark.slow  # a pytest session under xdist in a subprocess (~5 s): `make test-cli`
def test_under_xdist_the_controller_alone_checks_every_worker(project):
    pytest.importorskip("xdist")
    out = _pytest(project, "", "-n", "2")  # nothing written (runs/old was there before): passes
    assert out.returncode == 0 and "not as the tests found it" not in out.stdout, out.stdout[-2000:]
    out = _pytest(project, "b", "-n", "2")  # one worker writes; the other's session must not hide it
    assert out.returncode == 1, out.stdout[-2000:]
    assert out.stdout.count("runs/ is not as the tests found it") == 1 and "runs/by_b.txt" in out.stdout
    assert "runs/2026-01-01" not in out.stdout
