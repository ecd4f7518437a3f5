"""The first sweep a user runs, read as the user reads it: the tables of a multi-method sweep.

A real (tiny) sweep of three methods at two failure levels under the default FLOP clock, collected
and written as `make paper-mini` writes its tables; the test reads the markdown tables. MeCeFO's
clock counts kernels the other methods do not have (its neighbour pass), and once that put it in
a setting of its own: a `variant` column, and the resilience column blank for every other method.
"""

import pytest

from conftest import MICRO

METHODS = ("checkpoint", "mecefo", "oobleck")
LEVELS = ("none", "high")


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    from analysis.collect import collect
    from analysis.tables import write_tables
    from conftest import compose_cfg
    from mecefo_exp.config import validate
    from mecefo_exp.run.experiment import Experiment

    root = tmp_path_factory.mktemp("first_sweep")
    for method in METHODS:
        for level in LEVELS:
            cfg = compose_cfg(
                MICRO
                + [
                    "experiment=paper_mini",
                    f"method={method}",
                    f"failure={level}",
                    "trainer.max_steps=6",
                    "trainer.eval_every=6",
                    "trainer.threads=1",
                ]
            )
            validate(cfg)
            Experiment(cfg, root / f"{method}_{level}").run()
    runs = collect([root])
    assert (runs["status"] == "ok").all(), runs[["run_dir", "status"]]
    paths = write_tables(runs, root / "analysis")
    return {name: paths[f"{name}.md"].read_text() for name in ("throughput", "perplexity")}


def rows_of(markdown: str):
    """(header cells, [row cells]) of the first markdown table in the text."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]


def test_the_throughput_table_has_one_row_per_method_and_every_resilience_filled(tables):
    header, rows = rows_of(tables["throughput"])
    assert header[:3] == ["model", "method", "seeds"], header
    assert "variant" not in header and not any("clock" in h for h in header), header
    assert sorted(row[1] for row in rows) == sorted(METHODS), rows
    for column in ("tok/s none", "tok/s high", "drop high", "drop/MeCeFO high"):
        at = header.index(column)
        assert all(row[at] for row in rows), (column, rows)


def test_the_perplexity_table_has_one_row_per_method(tables):
    header, rows = rows_of(tables["perplexity"])
    assert "variant" not in header, header
    assert sorted(row[1] for row in rows) == sorted(METHODS), rows
    for column in ("ppl none", "ppl high"):
        at = header.index(column)
        assert all(row[at] for row in rows), (column, rows)
