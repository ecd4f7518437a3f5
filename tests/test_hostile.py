"""Hostile inputs: what a run folder from elsewhere may contain, and what it may not do.

The tests that start runs in subprocesses (resumes, signals) are in the slow tier (`make test-slow`)."""

import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers.processes import children, is_alive

from conftest import MICRO, ROOT, run_py
from mecefo_exp.methods import REGISTRY


class _Marker:
    """Unpickling this writes a file: the proof that loading ran code."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@pytest.mark.slow  # two runs in subprocesses (~8-20 s)
def test_resuming_a_folder_with_a_planted_pickle_runs_no_code(tmp_path):
    run_dir = tmp_path / "run"
    common = [
        *MICRO,
        "method=checkpoint",
        "failure=none",
        "method.checkpoint_interval=3",
        "trainer.max_steps=6",
        f"hydra.run.dir={run_dir}",
    ]
    out = subprocess.run([sys.executable, "run.py", *common], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    marker = tmp_path / "code_ran"
    newest = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    newest.write_bytes(pickle.dumps({"step": _Marker(marker)}))
    # whoever can write the folder can write the checksum beside the file too: the loader must refuse it
    newest.with_suffix(".sha256").write_text(f"{hashlib.sha256(newest.read_bytes()).hexdigest()}  {newest.name}\n")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "running"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=180)
    assert not marker.exists(), "loading the checkpoint ran code from the run folder"
    assert out.returncode == 0, out.stderr[-2000:]  # resumed from the older, plain checkpoint instead
    assert f"{newest} cannot be loaded (Weights only load failed" in out.stdout + out.stderr
    assert json.loads((run_dir / "summary.json").read_text())["resumes"][0]["from_step"] == 3


@pytest.mark.slow  # two runs in subprocesses (~8-20 s)
def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    run_dir = tmp_path / "run"
    common = [
        *MICRO,
        "method=checkpoint",
        "failure=none",
        "method.checkpoint_interval=3",
        "trainer.max_steps=7",
        "method.keep=3",
        f"hydra.run.dir={run_dir}",
    ]
    out = subprocess.run([sys.executable, "run.py", *common], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    newest = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a write cut short
    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 7 and summary["resumes"][0]["from_step"] == 3


@pytest.mark.parametrize("method", list(REGISTRY))
def test_a_zero_length_outage_is_a_failure_then_a_recovery(method, run_exp, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("time,worker,event\n5,1,fail\n5,1,recover\n")
    summary, run_dir = run_exp(f"method={method}", "failure=trace", "failure.unit=steps", f"failure.path={trace}")
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    assert summary["status"] == "ok" and summary["failures"] == 1
    assert rows[-1]["alive"] == 4  # the worker is back: not down for the rest of the run
    assert summary["mean_workers_down"] == 0.0
    kinds = [json.loads(line)["kind"] for line in open(run_dir / "events.jsonl")]
    assert kinds.index("fail") < kinds.index("recover")


def test_a_trace_path_that_is_not_a_regular_file_is_refused_before_it_blocks(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            *MICRO,
            "failure=trace",
            f"failure.path={fifo}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.strip().endswith("not a regular file"), out.stderr


def test_trace_times_that_overflow_after_scaling_are_refused(tmp_path):
    from mecefo_exp.failures import TraceError
    from mecefo_exp.failures.trace_file import read_trace_csv

    trace = tmp_path / "t.csv"
    trace.write_text("time,worker,event\n1e308,1,fail\n")
    with pytest.raises(TraceError, match="line 2: time 1e308 is too large"):
        read_trace_csv(str(trace), 4, 3600.0)


@pytest.mark.parametrize("override", ["experiment=debgu", "scenario=oobleck_artifact/bert", "local=foo"])
def test_an_unknown_preset_is_one_line_not_ignored(override, tmp_path):
    out, lines = run_py(override, f"hydra.run.dir={tmp_path / 'run'}", timeout=60)
    assert out.returncode == 2 and len(lines) == 1 and "no such preset" in lines[0] and "allowed:" in lines[0]
    assert not (tmp_path / "run").exists()


def test_hydras_own_sweep_syntax_for_a_group_is_checked_not_refused():
    from mecefo_exp.cli.presets import unknown_preset

    for ok in (
        "method=choice(checkpoint,mecefo)",
        "method=glob(*)",
        "method=glob(c*)",
        "method=checkpoint,mecefo",
        "failure=glob(*,exclude=none)",
    ):
        assert unknown_preset(["-m", ok]) is None, ok
    for bad, says in (
        ("method=choice(checkpoint,mecefoo)", "method=mecefoo: no such preset"),
        ("method=glob(zz*)", "method=glob(zz*): matches no preset"),
    ):
        said = unknown_preset(["-m", bad])
        assert said is not None and says in said and "allowed: baft, bamboo" in said, said


def test_an_unknown_key_in_the_personal_settings_file_is_named(monkeypatch, tmp_path):
    """A key no schema has in conf/local/default.yaml: the line was cut before the key ("In
    'local/default': ConfigKeyError raised while composing config:")."""
    import shutil

    from mecefo_exp import api
    from mecefo_exp.cli import preflight

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "local" / "default.yaml").write_text("# @package _global_\ntrainer:\n  max_stepz: 3\n")
    monkeypatch.setattr(api, "conf_dir", lambda: conf)  # where the command line composes
    said = preflight.check_overrides(["experiment=debug"])
    assert said is not None and "\n" not in said, said
    assert said.startswith("In 'local/default'") and "max_stepz" in said and "max_steps" in said, said


def test_a_misspelt_key_in_a_sweep_is_one_line_before_any_job():
    """A key no schema has, typed in a sweep, was left to Hydra: 8 lines after its own set-up."""
    from mecefo_exp.cli.preflight import check_overrides

    said = check_overrides(["-m", "method=checkpoint,mecefo", "trainer.max_stepz=3", "trainer.lr=1e-3,2e-3"])
    assert said is not None and "\n" not in said and "trainer.max_stepz" in said and "max_steps" in said, said
    # a sweep whose keys all exist, and one whose key belongs to one of the swept presets only, are Hydra's
    assert check_overrides(["-m", "method=checkpoint,mecefo", "trainer.lr=1e-3,2e-3"]) is None
    assert check_overrides(["-m", "method=mecefo,checkpoint", "method.rank=8"]) is None


@pytest.mark.parametrize(
    "override, says",
    [
        ("failure.horizon_factor=inf", "failure.horizon_factor=inf: must be a finite number"),
        ("trainer.lr=inf", "trainer.lr=inf: must be a finite number"),
        ("trainer.weight_decay=nan", "trainer.weight_decay=nan: must be a finite number"),
    ],
)
def test_non_finite_settings_are_refused(override, says):
    from conftest import compose_cfg
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        validate(compose_cfg([override]))


def test_a_non_finite_value_inside_a_dict_valued_setting_is_refused():
    """A dict with number keys ({30: 1e400}) used to be skipped by the check, and the run ended
    with sim_time_s: null."""
    from conftest import compose_cfg
    from mecefo_exp.config import ConfigError, validate

    cfg = compose_cfg(["method=checkpoint", "method.restart_on=survivors", "++method.restart_s_by_nodes={30:1e400}"])
    with pytest.raises(ConfigError, match=r"method\.restart_s_by_nodes\.30=inf: must be a finite number"):
        validate(cfg)


@pytest.mark.slow  # two runs in subprocesses (~8-20 s)
def test_a_failure_rate_that_would_exhaust_memory_is_one_line_before_any_step(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            *MICRO,
            "failure=poisson",
            "failure.mtbf=1e-7",
            "failure.mttr=1",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
    assert out.returncode == 2 and len(lines) == 1 and "at most 1 GB" in lines[0], out.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and not (run_dir / "metrics.jsonl").read_text()  # not one step


@pytest.mark.slow  # a frontier run's start in a subprocess (~7 s here, FLOP counts cached)
def test_a_frontier_trace_over_the_memory_budget_is_one_line_within_seconds_under_2_gb(tmp_path):
    """Llama 3 405B at 100x its failure rate: 4.3M server failures, 34.6M worker events (~7.6 GB
    drawn). Under a 2 GB address-space limit the run says so in one line and exits 2, before it
    draws anything (it used to reach 5.25 GB and die of MemoryError)."""
    import shutil

    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux)")
    run_dir = tmp_path / "run"
    started = time.time()
    out = subprocess.run(
        [
            "prlimit",
            "--as=2000000000",
            sys.executable,
            "run.py",
            "experiment=llama3_405b",
            "method=mecefo",
            "failure.every_h=0.03",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seconds = time.time() - started
    # the error is one line (besides the note that a study's experiment without -m runs one job of it)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith(("[", "note: "))]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert "~3.46e+07 events" in lines[0] and "at most 1 GB" in lines[0], lines[0]
    assert seconds < 60, seconds


@pytest.mark.slow  # a run in a subprocess (~10 s)
def test_a_diverged_loss_is_one_line_on_the_console_and_its_traceback_in_the_log(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            *MICRO,
            "method=checkpoint",
            "failure=none",
            "trainer.lr=1e30",
            "trainer.warmup_steps=1",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
    assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("failed: step 1: the training loss is nan") and str(run_dir) in lines[0], lines[0]
    assert "Traceback" in (run_dir / "run.log").read_text()


def test_a_diverged_loss_ends_the_run_failed_at_its_step(run_exp, tmp_path):
    from mecefo_exp.run.training import NonFiniteLoss

    with pytest.raises(NonFiniteLoss, match="the training loss is nan"):
        run_exp("method=checkpoint", "failure=none", "trainer.lr=1e30", "trainer.warmup_steps=1")
    summary = json.loads((tmp_path / "run1" / "summary.json").read_text())
    assert summary["status"] == "failed" and "diverged" in summary["error"] and summary["steps"] >= 1


@pytest.mark.slow  # two runs in subprocesses (~8-20 s)
def test_a_resumed_run_says_the_same_about_its_clock(tmp_path):
    run_dir = tmp_path / "run"
    common = [
        *MICRO,
        "method=checkpoint",
        "failure=none",
        "method.checkpoint_interval=3",
        "trainer.max_steps=6",
        f"hydra.run.dir={run_dir}",
    ]
    assert (
        subprocess.run([sys.executable, "run.py", *common], cwd=ROOT, capture_output=True, timeout=180).returncode == 0
    )
    before = json.loads((run_dir / "summary.json").read_text())["clock"]
    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    after = json.loads((run_dir / "summary.json").read_text())["clock"]
    assert after["compute"] == before["compute"] == "flops"
    assert after["efficiency"] == before["efficiency"] and after["fingerprint"] == before["fingerprint"]


@pytest.mark.parametrize(
    "override, says",
    [
        (
            "model.num_key_value_heads=3",
            "model.num_key_value_heads=3: must be >= 1 and divide model.num_attention_heads",
        ),
        ("cluster.n_workers=2000000", "cluster.n_workers=2000000: must be in 1..1,048,576"),
    ],
)
def test_sizes_that_cannot_run_are_refused_before_anything_is_built(override, says):
    from conftest import compose_cfg
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match=says.replace(".", r"\.")):
        validate(compose_cfg([override]))


def test_a_full_disk_inside_torch_save_is_recorded_as_no_space_left(run_exp, tmp_path, monkeypatch):
    import shutil as shutil_module
    from collections import namedtuple

    import torch

    real_save, calls = torch.save, {"n": 0}

    def save_until_the_disk_is_full(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 1:  # the initial checkpoint fits; the next one hits a full disk
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
        return real_save(obj, f, *args, **kwargs)

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", save_until_the_disk_is_full)  # the store imports torch when it saves
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage(10 << 30, 10 << 30, 0))
    with pytest.raises(OSError, match="No space left on device"):
        run_exp("method=checkpoint", "failure=none", "method.checkpoint_interval=3")
    summary = json.loads((tmp_path / "run1" / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    assert "inline_container" not in summary["error"]


@pytest.mark.slow  # two runs in subprocesses (~8-20 s)
def test_ctrl_c_is_one_line_and_the_traceback_goes_to_the_log_file(tmp_path):
    import signal
    import time

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "run.py", *MICRO, "trainer.max_steps=100000", "failure=none", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (
        (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").read_text().count("\n") >= 2
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.strip() and "Warning" not in ln]
    assert proc.returncode == 130 and lines[-1].startswith("stopped: Ctrl-C"), err[-2000:]
    assert "Traceback" not in err and "Traceback" in (run_dir / "run.log").read_text()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"


def _edit_summary(run_dir, **fields):
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(fields)
    path.write_text(json.dumps(summary))


def test_runs_timed_by_different_profile_files_are_different_configurations(tmp_path):
    from test_analysis import make_run

    from analysis.collect import collect

    for name, fingerprint, throughput in (
        ("slow_profile", "aaaaaaaaaaaa", 1000),
        ("fast_profile", "bbbbbbbbbbbb", 10000),
    ):
        run = make_run(tmp_path, name, "mecefo", "none", seed=0, thr=throughput, ppl=100)
        _edit_summary(run, clock={"compute": "profile_file", "fingerprint": fingerprint})
    df = collect([tmp_path])
    assert df["selected"].all(), "a run timed by another profile was taken for a duplicate and dropped"
    assert df["identity"].nunique() == 2
    assert sorted(df["throughput_tok_s"]) == [1000, 10000]


def test_runs_of_different_profile_clocks_are_different_configurations(tmp_path):
    """A measured profile or a profile file is not determined by the config: two seeds timed by one
    file and one by a file with every kernel x10 were once averaged as three seeds (47.3k +- 488.0k)."""
    from test_analysis import make_run

    from analysis.collect import collect

    for compute in ("profile_file", "measured"):
        for name, fingerprint, seed, throughput in (
            ("a0", "aaaaaaaaaaaa", 0, 1000),
            ("a1", "aaaaaaaaaaaa", 1, 1100),
            ("b0", "bbbbbbbbbbbb", 0, 100),
        ):
            run = make_run(tmp_path / compute, name, "mecefo", "none", seed=seed, thr=throughput, ppl=100)
            _edit_summary(run, clock={"compute": compute, "fingerprint": fingerprint})
        df = collect([tmp_path / compute])
        assert df["selected"].all()
        assert df["identity"].nunique() == 2, compute
        by_identity = df.groupby("identity")["throughput_tok_s"].apply(sorted).tolist()
        assert sorted(by_identity) == [[100], [1000, 1100]]


def test_a_flop_clocks_fingerprint_does_not_split_the_methods_of_one_sweep(tmp_path):
    """A FLOP clock follows from the config; its fingerprint also counts a method's own kernels
    (MeCeFO's neighbour pass), and counting it once put MeCeFO alone in a setting of its own."""
    from test_analysis import make_run

    from analysis.collect import collect

    for method, fingerprint in (("mecefo", "aaaaaaaaaaaa"), ("checkpoint", "bbbbbbbbbbbb")):
        for seed in (0, 1):
            run = make_run(tmp_path, f"{method}{seed}", method, "none", seed=seed, thr=1000 + seed, ppl=100)
            _edit_summary(run, clock={"compute": "flops", "fingerprint": fingerprint})
    df = collect([tmp_path])
    assert df["identity"].nunique() == 2, df["identity"].tolist()
    assert not any("clock.profile" in identity for identity in df["identity"]), df["identity"].tolist()
    assert df.get("variant", pd.Series([""] * len(df))).fillna("").eq("").all(), df["variant"].tolist()


def test_a_run_timed_by_a_profile_file_says_so_and_keeps_what_made_the_file(run_exp, tmp_path):
    first, first_dir = run_exp("failure=none", "trainer.max_steps=2", "trainer.numerics=false")
    assert first["clock"]["compute"] == "flops"
    second, _ = run_exp(
        "failure=none", "trainer.max_steps=2", "trainer.numerics=false", f"cluster.profile={first_dir / 'profile.json'}"
    )
    clock = second["clock"]
    assert clock["compute"] == "profile_file" and "efficiency_source" not in clock, clock
    assert clock["profile_file"]["compute"] == "flops" and clock["profile_file"]["efficiency_source"] == "preset"
    assert clock["fingerprint"] == first["clock"]["fingerprint"]


def test_a_summary_with_a_non_numeric_value_is_skipped_with_one_line_naming_it(tmp_path):
    from test_analysis import make_run

    make_run(tmp_path / "runs", "good", "checkpoint", "high", seed=0, thr=800, ppl=100)
    bad = make_run(tmp_path / "runs", "hand_edited", "checkpoint", "high", seed=1, thr=900, ppl=100)
    _edit_summary(bad, throughput_tok_s="fast")
    out = subprocess.run(
        [sys.executable, "-m", "analysis", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--no-figures"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    named = [line for line in out.stdout.splitlines() if "hand_edited" in line]
    assert len(named) == 1 and "throughput_tok_s is 'fast', not a number" in named[0], out.stdout
    assert "Traceback" not in out.stderr


def _wait_for(condition, timeout=120.0):
    import time

    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


SWEEP = [
    sys.executable,
    "run.py",
    "-m",
    *MICRO,
    "trainer.max_steps=100000",
    "trainer.eval_every=0",
    "hydra.callbacks.collect.figures=false",
]


@pytest.mark.slow  # a sweep in a subprocess (~15-30 s)
def test_a_terminated_joblib_sweep_stops_its_workers_and_marks_every_unfinished_job(tmp_path):
    import signal

    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            *SWEEP,
            "method=checkpoint,mecefo,bamboo",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for(lambda: len(list(sweep.glob("*/metrics.jsonl"))) == 2), "the two jobs never started"
        workers = children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert _wait_for(lambda: not any(is_alive(w) for w in workers), timeout=15), "a worker outlived the sweep"
    assert "sweep stopped by SIGTERM; 3 job(s) did not finish" in err, err[-2000:]
    assert "job 2 never started: " in err and "method=bamboo" in err
    started = sorted(sweep.glob("[0-9]_*/summary.json"))
    assert len(started) == 2
    for path in started:
        summary = json.loads(path.read_text())
        assert summary["status"] == "failed" and "the sweep was stopped (SIGTERM)" in summary["error"]


@pytest.mark.slow  # two sweeps in subprocesses (~10-20 s)
def test_a_second_sweep_into_a_busy_sweep_folder_is_refused_in_one_line(tmp_path):
    import signal

    sweep = tmp_path / "sweep"
    first = subprocess.Popen(
        [*SWEEP, "method=checkpoint,mecefo", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(lambda: len(list(sweep.glob("*/metrics.jsonl"))) == 1)
        second = subprocess.run(
            [*SWEEP, "method=bamboo", f"hydra.sweep.dir={sweep}"], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 2, second.stderr[-2000:]
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"sweep folder {sweep} is in use by pid {first.pid}" in lines[0], lines
        assert not any("bamboo" in p.name for p in sweep.iterdir())
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)
    assert first.returncode == 128 + signal.SIGTERM


def test_the_failed_jobs_report_names_only_this_sweeps_jobs(tmp_path):
    from mecefo_exp.cli.sweeps import failed_jobs

    for number, status in ((0, "ok"), (1, "failed"), (2, "failed")):  # job 2: another sweep's, into this folder
        job = tmp_path / f"{number}_method=x"
        (job / ".hydra").mkdir(parents=True)
        (job / "summary.json").write_text(json.dumps({"status": status, "error": "boom"}))
    assert [line.split(":", 1)[0] for line in failed_jobs(tmp_path, planned=2)] == [str(tmp_path / "1_method=x")]


@pytest.mark.slow  # two runs in subprocesses (~8-20 s)
def test_a_refused_resume_leaves_the_folders_record_as_it_was(tmp_path):
    import hashlib

    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            "run.py",
            *MICRO,
            "method=checkpoint",
            "failure=none",
            "method.checkpoint_interval=3",
            "trainer.max_steps=6",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for checkpoint in (run_dir / "checkpoints").glob("step_*.pt"):
        checkpoint.write_bytes(checkpoint.read_bytes()[:100])  # every write cut short: nothing to resume from
    _edit_summary(run_dir, status="running")  # as a killed run leaves it

    def files():
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in run_dir.iterdir()
            if p.is_file() and p.name not in ("run.log", ".run.owner", ".run.lock")
        }

    before = files()
    out, _ = run_py("resume=true", f"hydra.run.dir={run_dir}", timeout=180)
    assert out.returncode == 2
    assert [line for line in out.stderr.splitlines() if line.strip()] == [
        f"config error: resume=true: no checkpoint in {run_dir} can be loaded (2 tried)"
    ]
    assert files() == before


@pytest.mark.slow  # run.py in a subprocess (~5 s)
def test_a_file_given_as_the_run_folder_is_one_line(tmp_path):
    where = tmp_path / "a_file"
    where.write_text("not a folder")
    out, lines = run_py(*MICRO, f"hydra.run.dir={where}")
    assert out.returncode == 2 and len(lines) == 1 and "cannot hold a run: File exists" in lines[0], out.stderr[-2000:]
    assert where.read_text() == "not a folder"


def _unwritable_folder():
    """A folder nobody may create files in, root included: chmod does not stop root, but sysfs
    refuses every new file (Linux)."""
    where = Path("/sys/kernel")
    if not where.is_dir():
        return None
    try:
        os.close(os.open(where / "mecefo_probe", os.O_CREAT | os.O_WRONLY))
    except OSError:
        return where
    os.unlink(where / "mecefo_probe")
    return None


@pytest.mark.slow  # run.py in a subprocess (~5 s each)
@pytest.mark.parametrize("inside", [False, True], ids=["existing", "to_be_created"])
def test_a_run_folder_that_cannot_be_written_is_one_line(inside):
    """A read-only run folder (an existing one where no file can be created, or one that cannot
    be created there): one line, exit 2, nothing written."""
    folder = _unwritable_folder()
    if folder is None:
        pytest.skip("no folder here refuses new files to this user (sysfs on Linux does, even to root)")
    where = folder / "mecefo_run" if inside else folder
    out, lines = run_py(*MICRO, f"hydra.run.dir={where}")
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: hydra.run.dir={where} cannot hold a run: "), lines
    assert "Traceback" not in out.stdout + out.stderr


def _misfit(checkpoint):
    """The checkpoint, still plain data, of another model size: every 2-D weight loses a row."""
    import torch

    state = torch.load(checkpoint, weights_only=True)
    state["model"] = {k: v[:-1] if v.dim() == 2 else v for k, v in state["model"].items()}
    torch.save(state, checkpoint)
    from mecefo_exp.methods.checkpointing import CHECKSUM_SUFFIX, file_sha256

    sha = checkpoint.with_suffix(CHECKSUM_SUFFIX)
    if sha.exists():  # intact on disk (its checksum matches): it just belongs to another run's shape
        sha.write_text(file_sha256(checkpoint) + "\n")


def _resume_in_process(run_dir, overrides):
    from conftest import compose_cfg
    from mecefo_exp.run.experiment import Experiment

    return Experiment(compose_cfg([*MICRO, *overrides, "resume=true"]), run_dir).run()


RESUMABLE = [
    "method=checkpoint",
    "failure=none",
    "method.checkpoint_interval=2",
    "trainer.max_steps=4",
    "method.keep=3",
    "trainer.eval_every=0",
]


def test_a_checkpoint_that_loads_but_does_not_fit_falls_back_to_the_previous_one(run_exp, caplog):
    _, run_dir = run_exp(*RESUMABLE)
    newest = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    _misfit(newest)
    summary = _resume_in_process(run_dir, RESUMABLE)
    assert summary["status"] == "ok" and summary["steps"] == 4 and summary["resumes"][0]["from_step"] == 2
    warned = [r.getMessage() for r in caplog.records if newest.name in r.getMessage()]
    assert len(warned) == 1 and "does not fit this run" in warned[0] and "\n" not in warned[0], warned


def test_when_no_checkpoint_fits_the_resume_is_refused_and_the_record_left_as_it_was(run_exp):
    import hashlib

    from mecefo_exp.config import ConfigError

    _, run_dir = run_exp(*RESUMABLE)
    for checkpoint in (run_dir / "checkpoints").glob("step_*.pt"):
        _misfit(checkpoint)
    _edit_summary(run_dir, status="running")  # as a killed run leaves it

    def files():
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in run_dir.iterdir()
            if p.is_file() and p.name not in ("run.log", ".run.owner", ".run.lock")
        }

    before = files()
    with pytest.raises(ConfigError, match=f"no checkpoint in {run_dir} can be loaded .3 tried") as e:
        _resume_in_process(run_dir, RESUMABLE)
    assert "\n" not in str(e.value)
    assert files() == before


def test_a_config_yaml_edited_after_the_start_is_refused_on_resume(run_exp):
    from mecefo_exp.cli.preflight import check_resume

    _, run_dir = run_exp(*RESUMABLE)
    args = ["resume=true", f"hydra.run.dir={run_dir}"]
    assert check_resume(args) is None  # as it was written: resumable
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("max_steps: 4", "max_steps: 20"))
    said = check_resume(args)
    assert said is not None and "\n" not in said, said
    assert f"{config} was edited after the run started" in said


def test_a_torchft_worker_that_fails_leaves_its_traceback_in_its_own_log(tmp_path):
    """summary.json names torchft/worker-<w>.log for a worker's failure: the traceback must be
    there, not only on the console the workers share (it once ended before it)."""
    run_dir = tmp_path / "ft"
    (run_dir / "torchft").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")  # a config no worker can run: it fails at once
    env = {**os.environ, "MECEFO_TORCHFT_WORKER": "1", "MECEFO_TORCHFT_INCARNATION": "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "mecefo_exp.torchft_worker", str(run_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    logged = (run_dir / "torchft" / "worker-1.log").read_text()
    assert "worker 1 (process " in logged and "Traceback (most recent call last)" in logged, logged[-2000:]


def test_non_utf8_record_files_are_unreadable_runs_not_a_crash(tmp_path):
    """One summary.json or config.yaml in another encoding stopped `make figures` and a sweep's
    collection with a UnicodeDecodeError."""
    from test_analysis import make_run

    from analysis.collect import collect

    make_run(tmp_path, "good", "checkpoint", "high", seed=0, thr=800, ppl=100)
    bad_summary = make_run(tmp_path, "latin1_summary", "checkpoint", "high", seed=1, thr=900, ppl=100)
    (bad_summary / "summary.json").write_bytes('{"status": "ok", "note": "caf\u00e9"}'.encode("latin-1"))
    bad_config = make_run(tmp_path, "latin1_config", "checkpoint", "high", seed=2, thr=700, ppl=100)
    (bad_config / "config.yaml").write_bytes("seed: 2\nnote: caf\u00e9\n".encode("latin-1"))
    (bad_config / "metrics.jsonl").write_bytes(b'{"step": 0, "loss": 1.0}\n\xff\xfe\n')
    df = collect([tmp_path]).set_index("run_dir")
    assert df.loc[str((tmp_path / "latin1_summary").resolve()), "status"] == "unreadable"
    assert df.loc[str((tmp_path / "good").resolve()), "status"] == "ok"
    assert str((tmp_path / "latin1_config").resolve()) in df.index


def test_time_settings_that_overflow_the_clock_end_the_run_failed_in_one_line(run_exp, tmp_path):
    """cluster.restart_s=1e308 unscaled: two restarts make the clock infinite. The run used to end
    `ok` with sim_time_s null (or an OverflowError further on)."""
    from mecefo_exp.timing.clock import ClockOverflow

    with pytest.raises(ClockOverflow) as e:
        run_exp(
            "method=checkpoint",
            "failure=high",
            "trainer.numerics=false",
            "cluster.restart_s=1e308",
            "cluster.scale_stalls=false",
        )
    assert "\n" not in str(e.value) and "stall" in str(e.value) and "too large" in str(e.value)
    summary = json.loads((tmp_path / "run1" / "summary.json").read_text())
    assert summary["status"] == "failed" and "ClockOverflow" in summary["error"]


def test_a_config_yaml_missing_a_section_is_one_line_on_resume(run_exp):
    """A config.yaml that still parses but lacks a whole section (and a record from before the hash,
    which would catch the edit): the resume ended in an 18-line ConfigKeyError."""
    import yaml

    from mecefo_exp.cli.preflight import check_resume

    _, run_dir = run_exp(*RESUMABLE)
    _edit_summary(run_dir, config_sha256=None)
    (run_dir / "start.json").unlink()  # a run from before start.json
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    del config["method"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    said = check_resume(["resume=true", f"hydra.run.dir={run_dir}"])
    assert said is not None and "\n" not in said and "config.yaml lacks method" in said, said


def test_a_config_error_under_torchrun_is_said_once_and_its_restarts_end_at_once(tmp_path):
    """torchrun restarts the worker group on any exit but 0, up to --max-restarts: a config error was
    printed by every rank of every round (8 copies in 74 s). Rank 0 of the first round says it; the
    other ranks, and every rank of a later round of the same torchrun, exit 2 at once and say nothing."""
    run_id = f"test-{os.getpid()}-{time.time_ns()}"

    def rank(r, round_):
        env = {
            **os.environ,
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "WORLD_SIZE": "2",
            "PYTHONPATH": str(ROOT),
            "TORCHELASTIC_RESTART_COUNT": str(round_),
            "TORCHELASTIC_RUN_ID": run_id,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1",
        }  # nothing listens: reaching it would hang, then fail
        started = time.time()
        out = subprocess.run(
            [sys.executable, "run.py", "cluster=torchrun", "trainer.max_stesp=3"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.returncode, [ln for ln in out.stderr.splitlines() if ln.strip()], time.time() - started

    import tempfile

    try:
        code, lines, _ = rank(0, 0)
        assert code == 2 and len(lines) == 1 and "trainer.max_stesp" in lines[0], lines
        assert rank(1, 0)[:2] == (2, [])
        code, lines, took = rank(0, 1)
        assert (code, lines) == (2, []) and took < 20
    finally:
        for note in Path(tempfile.gettempdir()).glob(f"mecefo-config-refused-*-{run_id}"):
            note.unlink()
