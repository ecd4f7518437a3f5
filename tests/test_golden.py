"""Golden files (as torchtitan keeps them): the per-step losses and simulated times of two
short runs are committed; any numeric change to the model, data, methods or clock shows up.

Update them on purpose (and say why in the commit):
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_golden.py

Simulated times must match exactly (the default clock is a FLOP model: pure arithmetic).
Losses must match to 1e-6 relative: CPU math libraries differ in the last bits across
processors and thread counts; a real numeric change moves them far more.
"""

import json
import os
from pathlib import Path

import pytest

from conftest import read_jsonl

GOLDEN = Path(__file__).parent / "golden"
RUNS = {
    "failure_free": ["method=checkpoint", "failure=none", "trainer.max_steps=12"],
    "mecefo_high": ["method=mecefo", "failure=high", "trainer.max_steps=12", "seed=1"],
}


def record(run_dir):
    return [{"step": r["step"], "loss": r["loss"], "sim_time_s": r["sim_time_s"]}
            for r in read_jsonl(run_dir / "metrics.jsonl")]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_golden(run_exp, name):
    summary, run_dir = run_exp(*RUNS[name])
    rows = record(run_dir)
    path = GOLDEN / f"{name}.jsonl"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    golden = read_jsonl(path)
    assert [r["step"] for r in rows] == [g["step"] for g in golden]
    assert [r["sim_time_s"] for r in rows] == [g["sim_time_s"] for g in golden]
    for r, g in zip(rows, golden):
        assert r["loss"] == pytest.approx(g["loss"], rel=1e-6), (name, r["step"])
    if name == "mecefo_high":
        assert summary["degraded_steps"] > 0  # the golden run exercises the neighbour


def test_default_clock_ignores_this_machine(run_exp, monkeypatch):
    """The default clock is the same whatever this machine measures. Two runs with
    the machine's timings perturbed by 1.3x in between: identical losses and clocks; the same
    perturbation under hardware=measured does move the clock (so it was a real perturbation)."""
    from mecefo_exp.timing import profile as profile_mod

    real = profile_mod.time_kernels
    scale = {"x": 1.0}

    def perturbed(fns, warmup, repeats, device):
        return {k: 0.01 * scale["x"] * (i + 1) for i, k in enumerate(fns)}

    monkeypatch.setattr(profile_mod, "time_kernels", perturbed)
    common = ["method=mecefo", "failure=high", "trainer.max_steps=12", "seed=1"]
    _, a = run_exp(*common)
    _, m1 = run_exp(*common, "hardware=measured", "cluster.profile=fresh")
    scale["x"] = 1.3
    _, b = run_exp(*common)
    _, m2 = run_exp(*common, "hardware=measured", "cluster.profile=fresh")
    assert record(a) == record(b)
    assert [r["sim_time_s"] for r in record(m1)] != [r["sim_time_s"] for r in record(m2)]
    assert real is not perturbed
