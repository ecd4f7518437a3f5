"""What the analysis shows a reader: tables that name runs, not this machine's paths; paper
columns only beside the levels that ran; a throughput figure whose seven labels can be read and
whose title claims no interval that one seed cannot give."""

import matplotlib

matplotlib.use("Agg")

from analysis.collect import collect  # noqa: E402
from analysis.tables import perplexity_table, write_tables  # noqa: E402
from mecefo_exp.registry import REGISTRY  # noqa: E402
from test_analysis import make_run  # noqa: E402


def _one_seed_sweep(root, methods=tuple(REGISTRY), levels=("none", "high")):
    sweep = root / "sweeps" / "one_seed"
    for i, method in enumerate(methods):
        for j, level in enumerate(levels):
            make_run(sweep, f"{i}{j}_{method}_{level}", method, level, 0, thr=1000 - 100 * j - 10 * i, ppl=100 + j,
                     age=100 - i * 2 - j)
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
