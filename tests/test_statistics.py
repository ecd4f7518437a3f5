"""Seed statistics and sweep identity of the analysis: checked on hand-made numbers."""

import json
import math

import pandas as pd
import pytest

from analysis.collect import collect, distinguishing_keys
from analysis.tables import _relative_change, mean_ci, paired_changes, perplexity_table, throughput_table


def test_mean_ci_is_student_t():
    mean, half, n = mean_ci([10.0, 12.0, 14.0])
    assert (mean, n) == (12.0, 3)
    assert half == pytest.approx(4.302653 * 2.0 / math.sqrt(3), rel=1e-6)  # t(0.975, 2) * sd / sqrt(n)
    assert math.isnan(mean_ci([5.0])[1]) and mean_ci([5.0])[0] == 5.0
    assert mean_ci([float("nan"), 1.0, 3.0])[2] == 2  # non-finite values do not count


def _runs(rows):
    df = pd.DataFrame(rows)
    for col, value in {
        "status": "ok",
        "selected": True,
        "model": "m",
        "n_workers": 4,
        "max_steps": 10,
        "micro_batch": 2,
        "seq_len": 8,
        "label": "",
        "variant": "",
        "failure_variant": "",
    }.items():
        if col not in df:
            df[col] = value
    return df


def test_paired_change_is_tighter_than_independent_means():
    # seed effects are large (ppl 100 vs 200) but every seed's high run is exactly 2% above its
    # own failure-free run: the paired change is 2% with a zero-width interval
    rows = []
    for seed, base in enumerate([100.0, 200.0, 150.0]):
        rows.append({"method": "mecefo", "failure": "none", "seed": seed, "final_val_ppl": base})
        rows.append({"method": "mecefo", "failure": "high", "seed": seed, "final_val_ppl": base * 1.02})
    runs = _runs(rows)
    paired = paired_changes(runs, "final_val_ppl", ["method"], _relative_change)
    mean, half, n = paired[("mecefo",)]["high"]
    assert mean == pytest.approx(0.02) and half == pytest.approx(0.0, abs=1e-12) and n == 3
    t = perplexity_table(runs)
    row = t.iloc[0]
    assert row["change_high"] == pytest.approx(0.02) and row["change_high_pairs"] == 3
    assert row["ppl_none_ci95"] > 100  # the unpaired spread of the means is huge
    assert row["n_seeds"] == 3


def test_paired_change_skips_unpaired_seeds():
    rows = [
        {"method": "mecefo", "failure": "none", "seed": 0, "final_val_ppl": 100.0},
        {"method": "mecefo", "failure": "high", "seed": 0, "final_val_ppl": 110.0},
        {"method": "mecefo", "failure": "high", "seed": 7, "final_val_ppl": 500.0},
    ]  # no seed-7 baseline
    t = perplexity_table(_runs(rows))
    assert t.iloc[0]["change_high"] == pytest.approx(0.10) and t.iloc[0]["change_high_pairs"] == 1


def test_failure_free_run_is_the_baseline_of_every_reading():
    rows = [{"method": "mecefo", "failure": "none", "seed": 0, "throughput_tok_s": 1000.0}]
    for reading, thr in (("failure.repair=fixed", 700.0), ("failure.repair=replace", 950.0)):
        rows.append(
            {"method": "mecefo", "failure": "high", "seed": 0, "throughput_tok_s": thr, "failure_variant": reading}
        )
    t = throughput_table(_runs(rows)).set_index("failure_variant")
    assert t.loc["failure.repair=fixed", "drop_high"] == pytest.approx(0.30)
    assert t.loc["failure.repair=replace", "drop_high"] == pytest.approx(0.05)
    assert t.loc["failure.repair=replace", "thr_none"] == pytest.approx(1000.0)


def test_a_shared_baseline_is_counted_once_per_reading():
    """Failure-free runs serve two readings: each reading's row still has 3 seeds, not 6."""
    rows = []
    for seed, base in enumerate([100.0, 120.0, 140.0]):
        rows.append({"method": "mecefo", "failure": "none", "seed": seed, "final_val_ppl": base})
        for reading in ("failure.repair=fixed", "failure.repair=replace"):
            rows.append(
                {
                    "method": "mecefo",
                    "failure": "high",
                    "seed": seed,
                    "final_val_ppl": base + 1,
                    "failure_variant": reading,
                }
            )
    t = perplexity_table(_runs(rows))
    assert list(t["n_seeds"]) == [3, 3]
    assert t["ppl_none_ci95"].tolist() == pytest.approx([mean_ci([100.0, 120.0, 140.0])[1]] * 2)


def test_distinguishing_keys_skip_what_the_name_implies():
    configs = [
        {"model.name": "a", "model.hidden_size": 32, "method.name": "mecefo", "method.rank": 8},
        {"model.name": "a", "model.hidden_size": 32, "method.name": "mecefo", "method.rank": 64},
        {"model.name": "b", "model.hidden_size": 64, "method.name": "checkpoint"},
    ]
    assert distinguishing_keys(configs) == ["method.name", "method.rank", "model.name"]


def _write_run(folder, cfg, summary):
    folder.mkdir(parents=True)
    import yaml

    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    (folder / "summary.json").write_text(json.dumps(summary))


def _cfg(seed=0, rank=64, failure="high", repair="fixed", threads=1):
    return {
        "model": {"name": "llama_tiny", "hidden_size": 32},
        "method": {"name": "mecefo", "rank": rank},
        "failure": {"name": failure, "repair": repair},
        "cluster": {"n_workers": 4},
        "trainer": {"max_steps": 10, "threads": threads},
        "data": {"micro_batch": 2, "seq_len": 8},
        "seed": seed,
    }


def test_a_rank_sweep_collects_to_one_row_per_rank(tmp_path):
    for i, (rank, seed) in enumerate([(8, 0), (64, 0), (8, 1), (64, 1)]):
        _write_run(
            tmp_path / f"r{i}",
            _cfg(seed=seed, rank=rank),
            {"status": "ok", "final_val_ppl": 100.0 + rank + seed, "throughput_tok_s": 1.0},
        )
    # a rerun at another thread count is the same configuration: it supersedes, not adds
    _write_run(
        tmp_path / "r9",
        _cfg(seed=1, rank=64, threads=2),
        {"status": "ok", "final_val_ppl": 166.0, "throughput_tok_s": 1.0},
    )
    df = collect([tmp_path])
    kept = df[df["selected"]]
    # method.rank acts only on a degraded step: it goes with the failure reading
    assert len(kept) == 4 and sorted(set(kept["failure_variant"])) == ["method.rank=64", "method.rank=8"]
    t = perplexity_table(df)
    assert len(t) == 2 and list(t["n_seeds"]) == [2, 2]
    by_rank = t.set_index("failure_variant")["ppl_high"]
    assert by_rank["method.rank=8"] == pytest.approx(108.5) and by_rank["method.rank=64"] == pytest.approx(
        165.0
    )  # 164 and the rerun 166
    assert t.set_index("failure_variant").loc["method.rank=64", "ppl_high_ci95"] > 0  # two seeds: an interval


def test_one_failure_free_run_is_the_baseline_of_every_value_of_a_degraded_step_setting(tmp_path):
    """The ablation (method.skip_attention=false, ...): MeCeFO's switches change nothing without
    failures, so one failure-free run per seed pairs with every switch's failure runs."""
    for seed in (0, 1):
        free = _cfg(seed=seed, failure="none")
        _write_run(tmp_path / f"free{seed}", free, {"status": "ok", "final_val_ppl": 100.0 + seed})
        for rank in (8, 64):
            _write_run(
                tmp_path / f"r{rank}_{seed}",
                _cfg(seed=seed, rank=rank),
                {"status": "ok", "final_val_ppl": (100.0 + seed) * (1.01 if rank == 8 else 1.02)},
            )
    t = perplexity_table(collect([tmp_path])).set_index("failure_variant")
    assert t.loc["method.rank=8", "change_high"] == pytest.approx(0.01)
    assert t.loc["method.rank=64", "change_high"] == pytest.approx(0.02)
    assert list(t["change_high_pairs"]) == [2, 2]


def test_labels_keep_two_sweeps_apart(tmp_path):
    for name in ("before", "after"):
        _write_run(
            tmp_path / name / "r0",
            _cfg(),
            {"status": "ok", "final_val_ppl": 100.0 if name == "before" else 90.0, "throughput_tok_s": 1.0},
        )
    df = collect([], labels={"before": [tmp_path / "before"], "after": [tmp_path / "after"]})
    assert df["selected"].all() and sorted(df["label"]) == ["after", "before"]
    t = perplexity_table(df).set_index("label")
    assert t.loc["before", "ppl_high"] == 100.0 and t.loc["after", "ppl_high"] == 90.0


def test_failure_free_runs_ignore_the_reading(tmp_path):
    _write_run(tmp_path / "a", _cfg(failure="none", repair="fixed"), {"status": "ok", "final_val_ppl": 1.0})
    _write_run(tmp_path / "b", _cfg(failure="none", repair="replace"), {"status": "ok", "final_val_ppl": 1.0})
    df = collect([tmp_path])
    assert df["selected"].sum() == 1  # the same computation: one supersedes the other


@pytest.mark.slow  # draws every figure of the study (~15 s): `make test-cli`
def test_convergence_study_table_and_figure(tmp_path):
    """paper_table3's analysis: a row per (reading, level), a column per run length, paired."""
    from analysis.convergence import analyze, convergence_table

    ppl = {}
    for steps in (300, 1000):
        for seed in (0, 1):
            base = 200.0 / (steps / 300) + 10 * seed
            ppl[("none", "fixed", steps, seed)] = base
            ppl[("high", "fixed", steps, seed)] = base * (1.10 if steps == 300 else 1.04)
            ppl[("high", "replace", steps, seed)] = base * 1.001
    for i, ((level, repair, steps, seed), value) in enumerate(ppl.items()):
        cfg = _cfg(seed=seed, failure=level, repair=repair)
        cfg["trainer"]["max_steps"] = steps
        _write_run(tmp_path / f"r{i}", cfg, {"status": "ok", "final_val_ppl": value, "throughput_tok_s": 1.0})
    long = convergence_table(collect([tmp_path])).set_index(["reading", "level", "max_steps"])
    assert len(long) == 4
    assert long.loc[("repair=fixed", "high", 300), "change"] == pytest.approx(0.10)
    assert long.loc[("repair=fixed", "high", 1000), "change"] == pytest.approx(0.04)
    assert long.loc[("repair=replace", "high", 1000), "change"] == pytest.approx(0.001)
    assert long.loc[("repair=replace", "high", 1000), "pairs"] == 2
    written = analyze([tmp_path], tmp_path / "out", verbose=False)
    md = (tmp_path / "out" / "tables" / "convergence.md").read_text()
    assert "+10.00%" in md and "+2.19%" in md  # ours at 300 steps, the paper's 1B at high
    assert any(p.name == "convergence.png" for p in written["figures"])
