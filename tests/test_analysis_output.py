"""What the analysis shows a reader: tables that name runs, not this machine's paths; paper
columns only beside the levels that ran; a throughput figure whose seven labels can be read and
whose title claims no interval that one seed cannot give."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from test_analysis import make_run  # noqa: E402

from analysis.collect import collect  # noqa: E402
from analysis.tables import perplexity_table, write_tables  # noqa: E402
from mecefo_exp.registry import REGISTRY  # noqa: E402


def _one_seed_sweep(root, methods=tuple(REGISTRY), levels=("none", "high")):
    sweep = root / "sweeps" / "one_seed"
    for i, method in enumerate(methods):
        for j, level in enumerate(levels):
            make_run(
                sweep,
                f"{i}{j}_{method}_{level}",
                method,
                level,
                0,
                thr=1000 - 100 * j - 10 * i,
                ppl=100 + j,
                age=100 - i * 2 - j,
            )
    return sweep


def test_no_table_prints_an_absolute_path(tmp_path):
    _one_seed_sweep(tmp_path)
    paths = write_tables(collect([tmp_path]), tmp_path / "out")
    for name, path in paths.items():
        text = path.read_text()
        assert str(tmp_path) not in text, f"{name} prints an absolute path"
    runs = paths["runs.md"].read_text()
    assert "sweeps/one_seed/00_checkpoint_none" in runs or "00_checkpoint_none" in runs


def test_the_perplexity_table_has_paper_columns_only_for_the_levels_run(tmp_path):
    _one_seed_sweep(tmp_path, methods=("checkpoint", "mecefo"))
    table = perplexity_table(collect([tmp_path]))
    assert "paper_change_high" in table and "paper_ppl_none" in table
    assert not [c for c in table if c.startswith("paper_") and ("low" in c or "medium" in c)]


def test_the_throughput_figure_with_every_method_has_readable_labels_and_no_interval_for_one_seed(tmp_path):
    from analysis.plots import throughput_bars

    _one_seed_sweep(tmp_path)
    fig = throughput_bars(collect([tmp_path]))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) == len(REGISTRY)
        overlaps = [(a, b) for a, b in zip(boxes, boxes[1:]) if a.overlaps(b)]
        assert not overlaps, f"{len(overlaps)} tick labels overlap"
    titles = " ".join(ax.get_title() for ax in fig.axes)
    assert "CI" not in titles  # one seed: no interval


NOTEBOOK = __import__("pathlib").Path(__file__).resolve().parent.parent / "analysis" / "paper.ipynb"


def test_the_notebook_is_saved_with_its_outputs_cell_ids_and_no_machine_paths():
    import json

    nb = json.loads(NOTEBOOK.read_text())
    ids = [c.get("id") for c in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in code[:8]), "the saved notebook lacks the outputs of its first cells"
    assert any("image/png" in o.get("data", {}) for c in code for o in c["outputs"])
    text = json.dumps([c["outputs"] for c in code])
    assert "/tmp/" not in text and "/work/" not in text and "/home/" not in text


@pytest.mark.slow  # the notebook over a few settings (~9 s): `make test-cli`
def test_the_notebook_draws_the_figures_of_a_few_settings_and_reads_make_results(tmp_path, monkeypatch, capsys):
    """Over a runs/ with many settings it draws the ANALYSIS_MAX_SETTINGS largest and says so;
    the Table 2 study defaults to the newest of runs/sweeps/paper_table2 and runs/results_*/."""
    import json
    import sys
    import types

    from test_analysis import make_run

    runs = tmp_path / "runs"
    for n in range(4):  # four settings: four models
        for i, (method, level) in enumerate([("checkpoint", "none"), ("checkpoint", "high")]):
            make_run(
                runs / f"s{n}",
                f"{i}_{method}_{level}",
                method,
                level,
                0,
                thr=1000 - 100 * i,
                ppl=100 + i,
                model=f"llama_{n}x",
                age=10 * n + i,
            )
    monkeypatch.setenv("ANALYSIS_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("ANALYSIS_RUNS", str(runs))
    monkeypatch.setenv("ANALYSIS_MAX_SETTINGS", "2")
    monkeypatch.delenv("ANALYSIS_TABLE2", raising=False)
    monkeypatch.setenv("ANALYSIS_TABLE3", str(tmp_path / "none"))
    monkeypatch.setitem(sys.modules, "IPython.display", types.SimpleNamespace(Markdown=str, display=lambda *a: None))
    scope = {"__name__": "__notebook__"}
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), str(NOTEBOOK), "exec"), scope)
    out = capsys.readouterr().out
    assert "figures for 2 of 4 settings" in out
    assert len(list((tmp_path / "out" / "figures").glob("throughput_*.png"))) == 2
    root = scope["ROOT"]
    later = tmp_path / "repo"
    (later / "runs" / "sweeps" / "paper_table2").mkdir(parents=True)
    (later / "runs" / "results_2099-01-01_00-00-00" / "paper_table2").mkdir(parents=True)
    scope["ROOT"] = later
    assert scope["newest"]("paper_table2").endswith("paper_table2")
    import os

    os.utime(later / "runs" / "sweeps" / "paper_table2", (1, 1))
    assert "results_2099" in scope["newest"]("paper_table2")
    scope["ROOT"] = root
