"""The checkout's runs/ stays as the tests found it (the hooks tests/conftest.py takes in).

A test writes its runs under tmp_path (hydra.run.dir=..., run_exp), never under runs/, where they
would mix with the user's own. The session lists runs/ when it starts and fails when it ends with
anything new there; what was there before is left alone. Under pytest-xdist each worker is a
session of its own: only the controller (the process without `workerinput`) lists, before any
worker starts and after every worker has finished, so no worker's files are missed, none is
counted twice and no worker fails for another's files.
"""

import os
from pathlib import Path

import pytest

#: the folder watched (tests/test_runs_guard.py points it elsewhere in a pytest of its own)
RUNS = Path(__file__).resolve().parent.parent / "runs"


def runs_listing(folder):
    """Every file and folder under `folder`, relative to it (an empty set when it does not exist)."""
    out = set()
    for here, dirs, files in os.walk(folder):
        rel = Path(here).relative_to(folder)
        out.update((rel / name).as_posix() for name in [*dirs, *files])
    return out


def _is_xdist_worker(config):
    return hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if not _is_xdist_worker(session.config):
        session.config._runs_before = runs_listing(RUNS)


def pytest_sessionfinish(session, exitstatus):
    before = getattr(session.config, "_runs_before", None)
    if before is None or _is_xdist_worker(session.config):
        return
    new = sorted(runs_listing(RUNS) - before)
    if not new:
        return
    lines = [
        f"the tests left {len(new)} new path(s) under {RUNS} (a test must write its runs under tmp_path; "
        "runs you started yourself while the tests ran would show here too):",
        *(f"  {RUNS.name}/{p}" for p in new[:20]),
    ]
    if len(new) > 20:
        lines.append(f"  ... and {len(new) - 20} more")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", f"{RUNS.name}/ is not as the tests found it", red=True)
        for line in lines:
            reporter.write_line(line)
    else:
        print("\n".join(lines))
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
