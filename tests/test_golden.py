"""Golden files (as torchtitan keeps them): the per-step losses and simulated times of two
short runs are committed; any numeric change to the model, data, methods or clock shows up.

Update them on purpose (and say why in the commit):
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_golden.py

corpus.txt holds the fingerprint of the runs' corpus (the small one of conftest.MICRO). A run on
another corpus cannot give the golden losses; that failure names the cause (usually installed
package versions other than the pinned ones) instead of asking for an update.

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
    return [
        {"step": r["step"], "loss": r["loss"], "sim_time_s": r["sim_time_s"]}
        for r in read_jsonl(run_dir / "metrics.jsonl")
    ]


#: the fingerprint of the corpus the golden runs were made with
CORPUS = GOLDEN / "corpus.txt"


def corpus_message(got: str, want: str) -> str:
    """Why a golden run's corpus (fingerprint `got`) is not the one tests/golden/ was made with."""
    from mecefo_exp.local_corpus import version_differences

    differs = version_differences()
    if differs:
        cause = (
            "installed versions differ from the pinned ones: "
            + ", ".join(differs)
            + " (`make setup` installs the pinned ones)"
        )
    else:
        cause = (
            "the packages have the pinned versions, so the difference is elsewhere: the Lee corpus "
            "(.cache/corpus/), the shipped CPython texts or the code that builds the corpus"
        )
    return (
        f"the golden runs' corpus has fingerprint {got} here, not {want} (the one tests/golden/ was made with): {cause}"
    )


@pytest.mark.parametrize("name", sorted(RUNS))
def test_golden(run_exp, name):
    summary, run_dir = run_exp(*RUNS[name])
    rows = record(run_dir)
    path = GOLDEN / f"{name}.jsonl"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        CORPUS.write_text(summary["data_fingerprint"] + "\n")
    want = CORPUS.read_text().strip()
    assert summary["data_fingerprint"] == want, corpus_message(summary["data_fingerprint"], want)
    golden = read_jsonl(path)
    changed = (
        f"{name}: a numeric change to the model, data, methods or clock; if it is meant, update the golden "
        "files (UPDATE_GOLDEN=1, see this file's docstring) and say why in the commit"
    )
    assert [r["step"] for r in rows] == [g["step"] for g in golden], changed
    assert [r["sim_time_s"] for r in rows] == [g["sim_time_s"] for g in golden], changed
    for r, g in zip(rows, golden):
        assert r["loss"] == pytest.approx(g["loss"], rel=1e-6), f"{changed} (step {r['step']})"
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


def test_a_different_corpus_is_explained_not_sent_to_update(monkeypatch):
    from mecefo_exp import local_corpus

    versions = {**local_corpus.REFERENCE_VERSIONS, "tokenizers": "0.24.0"}
    monkeypatch.setattr(local_corpus, "package_versions", lambda packages: {n: versions[n] for n in packages})
    want = CORPUS.read_text().strip()
    message = corpus_message("0123456789ab", want)
    assert "0123456789ab" in message and want in message
    assert "tokenizers 0.24.0 (the reference corpus: 0.23.3)" in message
    assert "regenerate" not in message.lower() and "UPDATE_GOLDEN" not in message and "make results" not in message
    versions["tokenizers"] = local_corpus.REFERENCE_VERSIONS["tokenizers"]
    assert "the difference is elsewhere" in corpus_message("0123456789ab", want)
