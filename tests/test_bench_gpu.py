"""bench/gpu.py: one line and exit 0 without CUDA; its code path checked on the CPU;
the profile it writes drives the simulated clock of a CPU run (cluster.profile=<file>)."""

import json
import subprocess
import sys

import pytest
import torch

from conftest import ROOT

SMOKE = [
    "--device",
    "cpu",
    "--models",
    "llama_tiny",
    "--micro-batch",
    "2",
    "--seq-len",
    "64",
    "--steps",
    "5",
    "--warmup",
    "2",
    "--repeats",
    "1",
    "--rank",
    "8",
    "--precision",
    "bf16",
    "--data-sources",
    "[pydoc_topics,stdlib_docstrings,lee_background]",
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: the benchmark would run")
def test_without_cuda_it_says_so_in_one_line_and_exits_0():
    out = subprocess.run([sys.executable, "bench/gpu.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("no CUDA:") and out.stdout.count("\n") == 1


@pytest.mark.slow
def test_the_script_runs_on_the_cpu_and_its_profile_drives_a_cpu_run(tmp_path, run_exp):
    profile = tmp_path / "profiles" / "tiny.json"
    out = subprocess.run(
        [sys.executable, "bench/gpu.py", *SMOKE, "--write-profile", str(profile)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "harness/plain tokens/s" in out.stdout and "target neighbor <= 1.10 x floor" in out.stdout
    meta = json.loads(profile.read_text())["meta"]
    assert meta["precision"] == "bf16" and meta["model"] == "llama_tiny" and meta["device"] == "cpu"
    summary, _ = run_exp(
        "model=llama_tiny",
        "data.micro_batch=2",
        "data.seq_len=64",
        "method=mecefo",
        "trainer.max_steps=4",
        "trainer.eval_every=0",
        "data.eval_blocks=2",
        "trainer.progress=none",
        "data.sources=[pydoc_topics,stdlib_docstrings,lee_background]",
        f"cluster.profile={profile}",
        micro=False,
    )
    assert summary["status"] == "ok" and summary["clock"]["compute"] != "flops"


@pytest.mark.slow
def test_the_realistic_shapes_and_the_svd_timings_run_on_the_cpu_in_smoke_mode(tmp_path):
    """--realistic --svd --smoke: the code that measures the paper's shapes (plain loop, harness,
    harness compiled, compiled loop, each with its ratio) and the SVD refresh, at tiny shapes."""
    out = tmp_path / "gpu.json"
    run = subprocess.run(
        [
            sys.executable,
            "bench/gpu.py",
            "--realistic",
            "--svd",
            "--smoke",
            "--device",
            "cpu",
            "--models",
            "llama_tiny",
            "--micro-batch",
            "2",
            "--seq-len",
            "64",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--svd-rank",
            "8",
            "--precision",
            "bf16",
            "--data-sources",
            "[pydoc_topics,stdlib_docstrings,lee_background]",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "harness / plain tokens/s" in run.stdout and "harness compiled / compiled loop" in run.stdout
    data = json.loads(out.read_text())
    (row,) = data["realistic"]
    assert set(row["seconds"]) == {"plain", "harness", "harness compiled", "compiled loop"}
    assert all(t > 0 for t in row["seconds"].values()) and row["flops_per_step"] > 0
    (svd,) = data["svd"]
    assert svd["full"]["seconds"] > 0 and svd["randomized"]["flops"] < svd["full"]["flops"]
