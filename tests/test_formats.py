"""analysis/formats.py: LaTeX, CSV and Markdown tables; the paper-hours axis; n/a panels."""

import math

import pandas as pd
import pytest


def _table():
    return pd.DataFrame(
        {"method": ["mecefo", "checkpoint"], "throughput_tok_s": [1234.5, math.nan], "drop_%": [2.98, 17.6]}
    )


def test_latex_is_booktabs_escaped_and_says_na():
    from analysis.formats import to_latex

    tex = to_latex(
        _table(),
        columns={"method": "method", "throughput_tok_s": "tokens/s", "drop_%": "drop (%)"},
        caption="Throughput",
        label="tab:t",
    )
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "1234.50" in tex and "n/a" in tex
    assert "drop (\\%)" in tex  # % would start a LaTeX comment
    assert "\\caption{Throughput}" in tex and "\\label{tab:t}" in tex
    with pytest.raises(KeyError, match="not in the table"):
        to_latex(_table(), columns={"nope": "x"})


def test_write_formats_writes_md_tex_csv(tmp_path):
    from analysis.formats import write_formats

    paths = write_formats(_table(), tmp_path, "throughput", "Throughput")
    assert sorted(paths) == ["throughput.csv", "throughput.md", "throughput.tex"]
    back = pd.read_csv(paths["throughput.csv"])
    assert list(back["method"]) == ["mecefo", "checkpoint"] and math.isnan(back["throughput_tok_s"][1])
    assert "| checkpoint | n/a | 17.60 |" in paths["throughput.md"].read_text()
    assert "throughput\\_tok\\_s" in paths["throughput.tex"].read_text()
    with pytest.raises(ValueError, match="allowed: md, tex, csv"):
        write_formats(_table(), tmp_path, "x", "x", formats=["pdf"])


def test_paper_hours_axis_and_na_panel():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.formats import na_panel, paper_hours_axis, seconds_per_paper_hour

    summary = {"max_steps": 300, "clock": {"paper_time": "scaled", "failure_free_step_s": 0.124}}
    sph = seconds_per_paper_hour(summary)  # 300 steps x 0.124 s = 37.2 s for the paper's 12.4 h
    assert sph == pytest.approx(3.0)
    assert seconds_per_paper_hour({"clock": {"paper_time": "real"}}) == 3600.0
    assert seconds_per_paper_hour({}) is None
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([0, 37.2], [1, 0])
    sec = paper_hours_axis(a, sph)
    assert sec.get_xlabel() == "paper hours"
    a.set_xlim(0, 37.2)
    fig.canvas.draw()
    assert sec.get_xlim() == pytest.approx((0, 12.4))  # the run's 37.2 simulated s are the paper's 12.4 h
    na_panel(b)
    assert [t.get_text() for t in b.texts] == ["n/a"]
    plt.close(fig)
