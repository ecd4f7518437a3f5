"""Input files are regular files of bounded size, checked before a byte is read: a FIFO, a link
to /dev/zero or a file of gigabytes is one line, not a hang or an exhausted memory; and analysis
lists a record with numbers no run writes (NaN, infinity, negative, 1e308) as unreadable."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from mecefo_exp.bounded_read import InputRefused, open_bounded, read_text_bounded


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)  # no block written: the file system holds gigabytes of nothing
    return path


def test_a_regular_file_within_the_bound_reads(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("0,add,node1\n")
    assert read_text_bounded(path, 100) == "0,add,node1\n"
    with open_bounded(path, 100, encoding="utf-8") as f:
        assert list(f) == ["0,add,node1\n"]


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path):
    path = sparse(tmp_path / "huge.csv", 2 * 1024**3)
    with pytest.raises(InputRefused) as e:
        open_bounded(path, 1024**2, "failure.path=")
    assert str(e.value) == (
        f"failure.path={path}: 2.0 GB (2,147,483,648 bytes), larger than the 1.0 MB allowed for this file"
    )


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder"])
def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / "summary.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block until a writer came
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    expected = {"fifo": "a FIFO (named pipe)", "dev_zero": "a character device", "folder": "a folder"}[kind]
    with pytest.raises(InputRefused, match=re.escape(f"{path}: {expected}, expected a regular file")):
        read_text_bounded(path, 1024)


def test_a_file_that_grows_while_read_stops_at_the_bound(tmp_path):
    path = tmp_path / "growing.jsonl"
    path.write_text("x" * 10)
    with open_bounded(path, 10, encoding="utf-8") as f:
        with open(path, "a") as w:
            w.write("y" * 100)
        with pytest.raises(InputRefused, match="grew past"):
            f.read()


# ------------------------------------------------------------------------ analysis
def a_run(tmp_path, name="run", **fields):
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    summary = {
        "status": "ok",
        "method": "checkpoint",
        "failure": "none",
        "model": "llama_tiny",
        "seed": 0,
        "n_workers": 4,
        "steps": 12,
        "throughput_tok_s": 100.0,
        "sim_time_s": 1.0,
        **fields,
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.mark.parametrize(
    "text, why",
    [
        ("NaN", "not a finite number"),
        ("Infinity", "not a finite number"),
        ("-Infinity", "not a finite number"),
        ("-1", "negative"),
        ("1e308", "above 1e+30"),
        ("1" * 300, "above 1e+30"),
    ],
)
def test_analysis_lists_a_run_with_an_impossible_number_as_unreadable(tmp_path, text, why):
    from analysis.collect import load_run

    run = a_run(tmp_path)
    raw = (run / "summary.json").read_text().replace('"throughput_tok_s": 100.0', f'"throughput_tok_s": {text}')
    (run / "summary.json").write_text(raw)
    row = load_run(run)
    assert row["status"] == "unreadable", row
    assert row["error"].startswith("summary.json: throughput_tok_s is ") and why in row["error"]
    assert len(row["error"]) < 120  # a 300-digit number is not copied into the table


def test_analysis_does_not_average_an_impossible_seed_into_the_mean(tmp_path):
    from analysis.collect import collect

    a_run(tmp_path, "a", seed=0, throughput_tok_s=100.0)
    a_run(tmp_path, "b", seed=1, throughput_tok_s=-1.0)
    a_run(tmp_path, "c", seed=2, throughput_tok_s=float("nan"))
    df = collect([tmp_path / "runs"])
    ok = df[df["status"] == "ok"]
    assert list(ok["throughput_tok_s"]) == [100.0]
    assert sorted(df[df["status"] == "unreadable"]["seed"].dropna()) in ([], [1, 2], [1.0, 2.0])


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "sparse"])
def test_python_m_analysis_refuses_a_summary_that_is_not_a_bounded_file(tmp_path, kind):
    run = a_run(tmp_path)
    summary = run / "summary.json"
    summary.unlink()
    if kind == "fifo":
        os.mkfifo(summary)
    elif kind == "dev_zero":
        summary.symlink_to("/dev/zero")
    else:
        sparse(summary, 2 * 1024**3)
    out = subprocess.run(
        [sys.executable, "-m", "analysis.collect", str(tmp_path / "runs"), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import pandas as pd

    table = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert list(table["status"]) == ["unreadable"]
    assert {"fifo": "FIFO", "dev_zero": "character device", "sparse": "larger than"}[kind] in table["error"][0]


# ------------------------------------------------------------------------ failure traces
LIMIT_AS = 1536 * 1024**2  # reading a 2 GB trace whole needs more than this; refusing it, far less


@pytest.mark.slow  # run.py on a 2 GB sparse file, twice (~10 s): `make test-cli`
@pytest.mark.parametrize("kind, header", [("trace", "time,worker,event\n"), ("nodes", "")])
def test_a_2_gb_failure_trace_is_refused_in_one_line_before_it_is_read(tmp_path, kind, header):
    """A sparse 2 GB trace (one line of gigabytes) under a 1.5 GB address-space limit: one line, exit 2."""
    import resource

    path = tmp_path / "trace.csv"
    path.write_text(header + "1,0,fail\n" if kind == "trace" else "0,add,node1\n")
    with open(path, "r+b") as f:
        f.truncate(2 * 1024**3)
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
    code = (
        "import sys; from conftest import compose_cfg, MICRO; from mecefo_exp.config import validate, ConfigError\n"
        f"try:\n    validate(compose_cfg([*MICRO, 'failure={kind}', 'failure.path={path}']))\n"
        "except ConfigError as e:\n    print(e); sys.exit(2)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True, text=True, timeout=120, preexec_fn=limit
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stdout.strip() == (
        f"failure.path={path}: 2.0 GB (2,147,483,648 bytes), larger than the 32.0 MB allowed for this file"
    )
