"""analysis/paper_scale.py on a sweep folder built by hand.

One model (llama_350m), the paper's three methods, failure-free throughput 1000 tokens/s each,
and two readings at failure=high whose drops are chosen against the paper's (Table 2, 350M:
Bamboo 7.04%, Oobleck 10.14%, MeCeFO 1.07%):

    reading                        Bamboo          Oobleck                      MeCeFO                        reproduces
    per_worker/1gpu/fixed          7.50% (0.46pp)  12.00% (1.86pp, 18% rel)     1.50% (0.43pp, 40% rel)       yes
    cluster/8gpu/replace 60s       7.00%           10.00%                       5.00% (3.93pp, 367% rel)      no

so both tolerances (1 percentage point, 25% relative) are exercised. Besides: Bamboo at low
(drop 3%), MeCeFO's bandwidth pair at 12.5 GB/s (none 800, high 780: compared with its own
failure-free run, drop 2.5%), one failed run (listed, in no table) and one high run without a
failure-free run at its bandwidth (listed as unmatched).
"""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis import paper_scale  # noqa: E402
from analysis.callback import CollectCallback  # noqa: E402

MODEL = "llama_350m"
DEFAULT = "per_worker/1gpu/fixed"
OTHER = "cluster/8gpu/replace 60s"
MEMORY = {
    "capacity_GB": 80.0,
    "shard": "none",
    "static_GB": 6.6,
    "peak_GB": {"normal": 40.0, "naive": 90.0, "neighbour": 30.0},
    "fits": {"normal": True, "naive": False, "neighbour": True},
}
CLOCK = {
    "timed_model": MODEL,
    "compute": "flops",
    "efficiency": 0.25,
    "efficiency_source": "calibrated",
    "implied_mfu": 0.24,
    "failure_free_step_s": 1.75,
    "flop_ratio_neighbour_normal": 1.59,
}


def make_run(
    sweep,
    n,
    method,
    failure,
    thr,
    process="per_worker",
    unit_gpus=1,
    repair="fixed",
    replace_s=300.0,
    gbps=25.0,
    status="ok",
    hydra_repair=None,
):
    """A run folder as the trainer leaves it: summary.json and the resolved config.yaml (and the
    Hydra copy, which may disagree after a resume: `hydra_repair`)."""
    d = sweep / f"{n}_seed=0_{method}_{failure}_{process}_{unit_gpus}_{repair}_{replace_s:g}_{gbps:g}"
    (d / ".hydra").mkdir(parents=True)
    cfg = {
        "experiment": "paper_table2",
        "seed": 0,
        "model": {"name": MODEL},
        "method": {"name": method},
        "failure": {
            "name": failure,
            "every_h": 0.5,
            "recover_h": 2.0,
            "process": process,
            "unit_gpus": unit_gpus,
            "repair": repair,
            "replace_s": replace_s,
        },
        "cluster": {"n_workers": 32},
        "trainer": {"max_steps": 6000, "numerics": False},
        "data": {"micro_batch": 256, "seq_len": 256},
        "hardware": {"name": "a100_32", "inter_node_GBps": gbps},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    hydra_cfg = json.loads(json.dumps(cfg))
    hydra_cfg["failure"]["repair"] = hydra_repair or repair
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(hydra_cfg))
    summary = {
        "status": status,
        "method": method,
        "failure": failure,
        "model": MODEL,
        "seed": 0,
        "n_workers": 32,
        "max_steps": 6000,
        "throughput_tok_s": thr,
        "sim_time_s": 6000 * 2097152 / thr if thr else None,
        "failures": 0 if failure == "none" else 5,
        "fatal": 0,
        "numerics": False,
        "hardware": "a100_32",
        "timing_model": MODEL,
        "failures_expected": 0.0 if failure == "none" else 5.2,
        "mean_workers_down": 0.0,
        "mean_workers_down_expected": 0.0 if failure == "none" else 3.5,
        "time_breakdown": {
            "compute": 1.0,
            "comm": 0.0,
            "ft_overhead": 0.0,
            "lost_work": 0.0,
            "stall": 0.0,
            "degraded_extra": 0.0,
        },
        "clock": CLOCK,
        "memory": MEMORY,
    }
    if status != "ok":
        summary["error"] = "RuntimeError: boom"
    (d / "summary.json").write_text(json.dumps(summary))
    return d


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper_scale") / "sweep"
    n = iter(range(100))
    other = dict(process="cluster", unit_gpus=8, repair="replace", replace_s=60.0)
    for method, high_default, high_other in (
        ("bamboo", 925.0, 930.0),
        ("oobleck", 880.0, 900.0),
        ("mecefo", 985.0, 950.0),
    ):
        make_run(root, next(n), method, "none", 1000.0)
        make_run(root, next(n), method, "high", high_default)
        # the Hydra copy says `fixed`: the run's own config.yaml (replace) must win
        make_run(root, next(n), method, "high", high_other, hydra_repair="fixed", **other)
    make_run(root, next(n), "bamboo", "low", 970.0)
    make_run(root, next(n), "mecefo", "none", 800.0, gbps=12.5)
    make_run(root, next(n), "mecefo", "high", 780.0, gbps=12.5)
    make_run(root, next(n), "mecefo", "high", 700.0, gbps=50.0)  # no failure-free run at 50 GB/s
    make_run(root, next(n), "oobleck", "medium", None, status="failed")
    return root


@pytest.fixture(scope="module")
def analyzed(sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("paper_scale_out")
    written = paper_scale.analyze([sweep], out, figures=True, verbose=False)
    return out, written


def test_collect_reads_the_reading_from_config_yaml(sweep):
    runs = paper_scale.collect_study([sweep])
    assert len(runs) == 14 and bool(runs["selected"].all())
    high = runs[runs["failure"] == "high"]
    assert sorted(set(high["reading"])) == sorted({DEFAULT, OTHER})
    assert set(runs.loc[runs["failure"] == "none", "reading"]) == {paper_scale.NO_READING}
    assert runs.loc[runs["reading"] == OTHER, "outage_s"].tolist() == [60.0] * 3
    assert set(runs.loc[(runs["reading"] == DEFAULT), "outage_s"]) == {7200.0}
    assert paper_scale.reading_label("per_worker", 1, "tick", 300.0) == "per_worker/1gpu/tick"


def test_drops_and_reproduces(sweep):
    runs = paper_scale.collect_study([sweep])
    t = paper_scale.table2_readings(paper_scale.drop_table(runs))
    assert t["reading"].tolist() == [DEFAULT, OTHER]
    d, o = t.iloc[0], t.iloc[1]
    assert (d["drop_bamboo"], d["drop_oobleck"], d["drop_mecefo"]) == pytest.approx((0.075, 0.12, 0.015), abs=1e-12)
    assert (o["drop_bamboo"], o["drop_oobleck"], o["drop_mecefo"]) == pytest.approx((0.07, 0.10, 0.05), abs=1e-12)
    assert d["paper_drop_mecefo"] == pytest.approx(0.0107)
    assert [d[f"match_{m}"] for m in ("bamboo", "oobleck", "mecefo")] == ["yes", "yes", "yes"]
    assert [o[f"match_{m}"] for m in ("bamboo", "oobleck", "mecefo")] == ["yes", "yes", "no"]
    assert t["reproduces"].tolist() == ["yes", "no"]


def test_which_reading(sweep):
    runs = paper_scale.collect_study([sweep])
    matrix, counts, winners = paper_scale.which_reading(paper_scale.table2_readings(paper_scale.drop_table(runs)))
    assert winners == [DEFAULT]
    assert matrix.to_dict("records") == [
        {"reading": DEFAULT, MODEL: "yes", "all_models": "yes"},
        {"reading": OTHER, MODEL: "no", "all_models": "no"},
    ]
    assert counts.to_dict("records") == [{"model": MODEL, "readings": 2, "reproduce": 1, "reproducing": DEFAULT}]


def test_tolerance_edges():
    assert paper_scale.within(0.0207, 0.0107)  # exactly 1 pp
    assert not paper_scale.within(0.0208, 0.0107)
    assert paper_scale.within(0.2 * 1.25, 0.2)  # exactly 25% relative
    assert not paper_scale.within(0.2 * 1.26, 0.2)
    assert paper_scale.within(float("nan"), 0.1) is None
    assert paper_scale._all_of([True, None, True]) == "n/a" and paper_scale._all_of([True, None, False]) == "no"


def test_default_table_bandwidth_and_unmatched(sweep):
    runs = paper_scale.collect_study([sweep])
    t = paper_scale.table2_default(runs).set_index("method")
    assert t.loc["bamboo", "drop_low"] == pytest.approx(0.03)
    assert t.loc["mecefo", "drop_high"] == pytest.approx(0.015)
    assert t.loc["mecefo", "thr_none"] == 1000.0  # the 12.5 GB/s run is not averaged in
    assert t.loc["bamboo", "resilience_high"] == pytest.approx(0.075 / 0.015)
    assert t.loc["bamboo", "paper_drop_high"] == pytest.approx(0.0704)
    drops = paper_scale.drop_table(runs)
    bw = drops[(drops["method"] == "mecefo") & (drops["inter_node_GBps"] == 12.5)]
    assert bw["drop"].tolist() == pytest.approx([0.025])
    lines = paper_scale.problems(runs, drops)
    assert any("failed" in ln and "oobleck" in ln for ln in lines)
    assert any("no failure-free run" in ln and "50 GB/s" in ln for ln in lines)


def test_memory_and_clock(sweep):
    runs = paper_scale.collect_study([sweep])
    mem = paper_scale.memory_table(runs).iloc[0]
    assert (mem["peak_normal_GB"], mem["peak_neighbour_GB"], mem["peak_naive_GB"]) == (40.0, 30.0, 90.0)
    assert (mem["fits_normal"], mem["fits_neighbour"], mem["fits_naive"]) == ("yes", "yes", "no")
    assert mem["agrees_with_paper"] == "yes" and mem["source_method"] == "mecefo"
    # the markdown keeps one "fits" column per peak (three columns share the header)
    header, _, row = paper_scale.memory_markdown(paper_scale.memory_table(runs)).split("\n")[:3]
    cells = dict(enumerate(c.strip() for c in row.strip("|").split("|")))
    heads = [c.strip() for c in header.strip("|").split("|")]
    assert heads.count("fits") == 3
    assert [
        cells[i + 1]
        for i, h in enumerate(heads)
        if h.endswith(" GB") and h.split()[0] in ("normal", "neighbour", "naive")
    ] == ["yes", "yes", "no"]
    clock = paper_scale.clock_table(runs).iloc[0]
    assert clock["efficiency"] == 0.25 and clock["flop_ratio_neighbour_normal"] == 1.59
    assert clock["thr_none"] == 1000.0 and clock["paper_thr_none"] == 1199e3


def test_analyze_writes_tables_and_figures(analyzed):
    out, written = analyzed
    tables = out / "tables"
    for name in ("table2_default", "table2_readings", "which_reading", "memory", "clock"):
        assert (tables / f"{name}.md").exists() and (tables / f"{name}.csv").exists()
    assert "`per_worker/1gpu/fixed`" in (tables / "which_reading.md").read_text()
    assert "failed" in (tables / "runs.md").read_text()
    csv = pd.read_csv(tables / "table2_readings.csv")
    assert csv["reproduces"].tolist() == ["yes", "no"]
    for fig in ("mecefo_drop_vs_outage", "mecefo_drop_vs_bandwidth"):
        for ext in ("png", "pdf"):
            path = out / "figures" / f"{fig}_{MODEL}.{ext}"
            assert path.exists() and path.stat().st_size > 1000
    assert len(written["figures"]) == 4


def test_callback_study(sweep, tmp_path):
    with pytest.raises(ValueError):
        CollectCallback(study="nope")
    cb = CollectCallback(out=str(tmp_path / "out"), figures=False, study="paper_scale")
    cb._sweep_dir = sweep
    cb.on_multirun_end(config=None)
    assert (tmp_path / "out" / "tables" / "which_reading.md").exists()
    assert not (tmp_path / "out" / "figures").exists()


def test_the_gpu_presets_charge_an_svd_refresh_what_one_h100_measured():
    """hardware.svd_efficiency and rsvd_efficiency of h100_8 (and a100_32's rsvd_efficiency) are one
    H100's measured rates at LLaMA-7B's FFN shape (BENCHMARKS.md, "GPU", run 3: a full SVD of 11008 x
    4096 in 1,120.42 ms, the randomized one at rank 64 in 7.59 ms), as TFLOP/s of each one's formula
    over the preset's peak; a100_32 keeps the 2% assumption its published Table 2 was made with."""
    from conftest import compose_cfg
    from mecefo_exp.numerics.projections import full_svd_flops, randomized_svd_flops

    full, rand = full_svd_flops(11008, 4096), randomized_svd_flops(11008, 4096, 64, 8, 2)
    for preset in ("a100_32", "h100_8"):
        hw = compose_cfg([f"hardware={preset}"]).hardware
        peak = hw.peak_tflops * 1e12
        full_s = full / (peak * hw.svd_efficiency)
        assert full_s == pytest.approx(1.12042, rel=0.02) if preset == "h100_8" else hw.svd_efficiency == 0.02
        assert rand / (peak * hw.rsvd_efficiency) == pytest.approx(0.00759, rel=0.02), preset
