"""The decision map and advise: winners and margins from seeds, each cell's settings, bad input."""

import math
import time

import pandas as pd
import pytest

from analysis import advise, simulate
from analysis import decision_map as dm
from mecefo_exp.methods.intervals import daly_interval


def _runs(values):
    rows = []
    for method, effs in values.items():
        for seed, e in enumerate(effs):
            rows.append(
                {
                    "model": "7b",
                    "gpus": 64,
                    "rate_x": 1,
                    "repair_s": 600,
                    "method": method,
                    "seed": seed,
                    "effective_time": e,
                    "censored": False,
                }
            )
    return pd.DataFrame(rows)


def test_the_winner_and_its_paired_margin():
    """Seeds are paired (one trace per seed for every method): a margin that is the same on every seed
    is decided even when the seeds spread widely; one that changes sign is not."""
    t = dm.summarize(_runs({"mecefo": [0.95, 0.80, 0.90], "checkpoint": [0.94, 0.79, 0.89], "reft": [0.5] * 3}))
    row = t.iloc[0]
    assert row.winner == "mecefo" and row.runner_up == "checkpoint"
    assert row.margin == pytest.approx(0.01) and row.decided
    assert row.mecefo_ci95 > 0.1  # the unpaired spread is large
    t = dm.summarize(_runs({"mecefo": [0.95, 0.80, 0.90], "checkpoint": [0.93, 0.82, 0.89]}))
    assert not t.iloc[0].decided
    assert "(within interval)" in dm.markdown(t)


def test_each_cell_scales_its_run_and_fall_back_to_its_failures():
    """The run is 10 mean times between interruptions (2 h to 7 days); the in-place methods' fall-back
    interval is Young's for the whole-job faults; checkpoint-restart keeps auto."""
    probe = {"step_s": 7.0, "write_s": 3.0}
    cell = {"model": "405b", "gpus": 16384, "rate_x": 1, "repair_s": 600}
    over = dm.cell_overrides(cell, probe)
    steps = int(next(o for o in over["mecefo"] if o.startswith("trainer.max_steps=")).split("=")[1])
    assert steps * 7.0 == pytest.approx(10 * 54 * 86400 / 419, rel=1e-3)
    fallback = int(next(o for o in over["mecefo"] if o.startswith("method.checkpoint_interval=")).split("=")[1])
    job_mtbf = 54 * 86400 / 63
    assert fallback == round(daly_interval(3.0, job_mtbf) / 7.0)  # Daly's optimum for the whole-job faults
    assert f"method.fallback_every={fallback}" in over["jit"]
    assert not any("interval" in o for o in over["checkpoint"])
    small = dm.cell_overrides({**cell, "gpus": 256}, probe)
    steps = int(next(o for o in small["reft"] if o.startswith("trainer.max_steps=")).split("=")[1])
    assert steps == round(7 * 86400 / 7.0)  # capped at 7 days
    assert len(dm.cells()) == 4 * 6 + 4 * 6
    assert min(g for m in dm.MODELS.values() for g in m["sizes"]) == 64
    assert max(g for m in dm.MODELS.values() for g in m["sizes"]) == 65536


def test_bad_input_is_one_line_before_any_run(capsys):
    with pytest.raises(SystemExit, match="must be >= 1"):
        dm.main(["--seeds", "0"])
    assert advise.main(["method=nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("advise:") and "nosuch" in err[0]


@pytest.mark.slow
def test_the_quick_map_runs_end_to_end(tmp_path):
    assert dm.main(["--quick", "--seeds", "2", "--out", str(tmp_path), "--no-anchors"]) == 0
    table = pd.read_csv(tmp_path / "tables" / "decision_map.csv")
    assert len(table) == 2 * 3 and set(table.winner) <= set(dm.METHODS)
    assert (tmp_path / "figures" / "decision_map_7b.png").stat().st_size > 10_000


def test_advise_says_which_method_cannot_run_on_the_cluster_and_why():
    """A tensor-parallel layout without pipeline stages has no place for Bamboo's shadow: advise
    leaves Bamboo out, and its report says so in Bamboo's own words."""
    tp_only = ["hardware=h100_8", "cluster.n_workers=16", "parallel.tp=2", "parallel.pp=1", "failure.unit_gpus=2"]
    refused = advise.refused_here(simulate.compose(tp_only + ["trainer.numerics=false"]))
    assert list(refused) == ["bamboo"] and "needs parallel.pp >= 2" in refused["bamboo"]
    assert advise.refused_here(simulate.compose(["experiment=llama3_405b"])) == {}
    ranked = {"method": "mecefo", "effective": 0.9, "ci95": 0.01, "interval": 10, "errors": [], "rollbacks": 0.0}
    text = advise.report(
        {
            "results": [{**ranked, "steps": 100}],
            "left_out": refused,
            "failure": "failure=poisson",
            "assumptions": [],
            "step_s": 1.0,
            "write_s": 1.0,
            "mtbf_s": 3600.0,
            "young_s": math.inf,
            "seconds": 1.0,
        },
        1,
    )
    assert f"left out: {refused['bamboo']}" in text.splitlines()


@pytest.mark.slow
def test_advise_answers_for_llama3_in_under_30_s():
    start = time.perf_counter()
    a = advise.advise(["experiment=llama3_405b"], seeds=3, processes=2)
    assert time.perf_counter() - start < 30
    assert sorted(r["method"] for r in a["results"]) == sorted(dm.METHODS)
    assert all(r["effective"] > 0.9 for r in a["results"])
    # the decision map's failure model, its assumptions stated, and what would change the winner
    assert a["failure"].startswith("failure=llama3_taxonomy")
    keys = [x.key for x in a["assumptions"]]
    assert {
        "failure.job_faults.Dependency",
        "failure.job_faults.Unknown",
        "failure.replace_s",
        "cluster.collective_timeout_s",
        "method.checkpoint_write",
    } <= set(keys)
    assert a["robustness"]["winner"] == a["results"][0]["method"] and set(a["robustness"]["flips"]) == set(keys)
    text = advise.report(a, 3)
    assert "failure model: failure=llama3_taxonomy" in text and "robustness:" in text
    assert a["young_s"] / a["step_s"] == pytest.approx(32, abs=1)  # what checkpoint-restart's auto chose
