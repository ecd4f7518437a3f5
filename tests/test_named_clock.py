"""A clock the config names (`hardware.clock: package.module:Class`), as the artifact replay names
its throughput table: refused in one line where it names no clock, checked before any compute,
pricing every step and adding its summary where it does."""

import json

import pytest

from conftest import compose_cfg
from mecefo_exp.api import validate_run
from mecefo_exp.errors import ConfigError

NUMERICS_FREE = [
    "trainer.numerics=false",
    "trainer.max_steps=20",
    "trainer.eval_every=0",
    "trainer.progress=none",
    "model=llama_tiny",
    "cluster.n_workers=4",
    "failure=none",
]
TABLE = ["hardware=table", "hardware.samples_per_step=100", "+hardware.tables.default={2: 50, 4: 100}"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["+hardware.clock=no_such_module:Clock"],
            r"^hardware.clock='no_such_module:Clock': cannot be imported as package.module:Class",
        ),
        (["+hardware.clock=mecefo_exp.plan"], r"expected package.module:Class"),
        (["+hardware.clock=mecefo_exp.plan:Plan"], r"^hardware.clock: mecefo_exp.plan:Plan is not a clock: a subclass"),
        (["+hardware.clock=os:getcwd"], r"^hardware.clock: os:getcwd is not a clock"),
        (
            ["+hardware.clock=mecefo_exp.timing.clocks.hybrid_layout:LayoutSteps"],
            r"the hybrid-layout clock prices a layout with parallel.tp or parallel.pp > 1",
        ),
        (["+hardware.clock=helpers.clocks:TwiceAsSlow", "cluster.n_workers=3"], r"^TwiceAsSlow: cluster.n_workers"),
        (TABLE[:2] + ["+hardware.tables.checkpoint={4: 100}"], r"no table for method=mecefo and no default"),
        (TABLE[:2] + ["+hardware.tables.default={2: 50, 4: 0}"], r"cannot run here: hardware.tables.default is 0"),
        (TABLE[:2] + ["+hardware.tables.default={4: -1}"], r"hardware.tables.default: 4: -1: expected"),
        (["hardware=table", "+hardware.tables.default={4: 1}"], r"samples_per_step=0: must be >= 1"),
        (TABLE + ["parallel.pp=2"], r"with the throughput-table clock: a table's step is the whole step"),
    ],
)
def test_a_clock_that_is_not_there_or_refuses_the_config_is_one_line(overrides, message):
    cfg = compose_cfg(NUMERICS_FREE + ["method=mecefo", *overrides])
    with pytest.raises(ConfigError, match=message):
        validate_run(cfg)


def run_summary(tmp_path, *overrides):
    from mecefo_exp.api import run

    cfg = compose_cfg(NUMERICS_FREE + ["method=checkpoint", *overrides])
    validate_run(cfg)
    run(cfg, tmp_path)
    return json.loads((tmp_path / "summary.json").read_text())


def test_a_named_clock_prices_every_step_and_adds_its_summary(tmp_path):
    plain = run_summary(tmp_path / "plain")
    twice = run_summary(tmp_path / "twice", "+hardware.clock=helpers.clocks:TwiceAsSlow")
    assert twice["clock"]["compute"] == "twice" and plain["clock"]["compute"] == "flops"
    assert twice["clock"]["failure_free_step_s"] == pytest.approx(2 * plain["clock"]["failure_free_step_s"])
    assert twice["twice"]["steps"] == 20 and twice["twice"]["first_step_s"] >= 0  # its summary, from the books' span
    assert twice["sim_time_s"] > plain["sim_time_s"]
    assert "twice" not in plain and "window" not in plain and "window" not in twice


def test_the_table_clock_reports_its_window_and_the_kernels_clock_does_not(tmp_path):
    table = run_summary(tmp_path / "table", *TABLE)
    assert table["clock"]["compute"] == "table"
    assert table["clock"]["failure_free_step_s"] == pytest.approx(1.0)  # 100 samples at 100 samples/s on 4 nodes
    window = table["window"]
    assert window["credited_samples"] == 20 * 100 and window["samples_per_step"] == 100
    assert window["goodput_over_ideal"] <= 1.0


def test_only_a_clock_priced_from_kernels_warns_that_memory_does_not_fit(tmp_path, caplog):
    tiny_memory = "hardware.memory_GB=0.000001"
    with caplog.at_level("WARNING", logger="mecefo_exp"):
        run_summary(tmp_path / "kernels", tiny_memory)
    assert any("does not fit" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="mecefo_exp"):
        run_summary(tmp_path / "table", tiny_memory, *TABLE)  # the table says itself where a system does not fit
    assert not any("does not fit" in r.getMessage() for r in caplog.records)
