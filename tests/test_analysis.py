"""analysis/: collect, tables and figures on run folders built by hand.

The fixture is a small sweep of one setting (llama_tiny, 4 workers, 20 steps) whose numbers
are chosen so that every table entry can be computed by hand:

    method      failure  seed  throughput  final ppl   notes
    checkpoint  none     0     1000        100
    checkpoint  none     1     1200        110
    checkpoint  high     0      800        100
    checkpoint  high     1      850        110
    mecefo      none     0     1000        100
    mecefo      high     0      500        200        older duplicate (ok): superseded
    mecefo      high     0      950        102        the kept run (newest ok)
    mecefo      high     0        -          -        newest, failed: superseded by the ok run
    bamboo      high     0        -          -        failed, the only run of its key: listed
    oobleck     none     0        -          -        no summary.json: incomplete
"""

import json
import math
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis import paper  # noqa: E402
from analysis.collect import collect, committed, load_eval, read_table, workers_down, write_table  # noqa: E402
from analysis.tables import perplexity_table, throughput_table, time_breakdown_table, write_tables  # noqa: E402

SETTING = {"model": "llama_tiny", "n_workers": 4, "max_steps": 20, "micro_batch": 2, "seq_len": 16}
T0 = 1_700_000_000  # file times, so that "newest" does not depend on how fast the fixture is written


def _config(method, failure, seed, model="llama_tiny"):
    return (
        f"model:\n  name: {model}\n  hidden_size: 32\nmethod:\n  name: {method}\nfailure:\n  name: {failure}\n"
        f"seed: {seed}\ncluster:\n  name: local\n  n_workers: {SETTING['n_workers']}\n"
        f"trainer:\n  max_steps: {SETTING['max_steps']}\n  eval_every: 10\n"
        f"data:\n  micro_batch: {SETTING['micro_batch']}\n  seq_len: {SETTING['seq_len']}\n"
    )


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_run(
    root,
    name,
    method,
    failure,
    seed=0,
    status="ok",
    thr=None,
    ppl=None,
    age=0,
    summary=True,
    breakdown=None,
    events=(),
    grad_error=None,
    model="llama_tiny",
):
    """One run folder as the trainer leaves it; `age` in seconds before the newest run."""
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "config.yaml").write_text(_config(method, failure, seed, model))
    (d / ".hydra" / "overrides.yaml").write_text(f"- method={method}\n- failure={failure}\n- seed={seed}\n")
    steps = SETTING["max_steps"] if status == "ok" else 7
    tokens_per_step = SETTING["n_workers"] * SETTING["micro_batch"] * SETTING["seq_len"]
    sim = steps * tokens_per_step / thr if thr else 1.0
    # a rolled-back step 5 is logged twice; the second row is the committed one
    metrics = [
        {
            "step": s,
            "tokens": (s + 1) * tokens_per_step,
            "loss": 5.0 - 0.1 * s,
            "sim_time_s": sim * (s + 1) / steps,
            "wall_time_s": 0.1 * s,
            "alive": SETTING["n_workers"],
            "degraded": False,
        }
        for s in range(6)
    ]
    metrics += [{**metrics[5], "loss": 99.0, "sim_time_s": sim * 0.35}]
    metrics += [
        {
            "step": s,
            "tokens": (s + 1) * tokens_per_step,
            "loss": 5.0 - 0.1 * s,
            "sim_time_s": sim * (s + 1) / steps,
            "wall_time_s": 0.1 * s,
            "alive": SETTING["n_workers"],
            "degraded": False,
        }
        for s in range(6, steps)
    ]
    _jsonl(d / "metrics.jsonl", metrics)
    if ppl is not None:
        _jsonl(
            d / "eval.jsonl",
            [
                {
                    "step": 10,
                    "sim_time_s": sim / 2,
                    "tokens": 10 * tokens_per_step,
                    "val_loss": math.log(ppl * 2),
                    "val_ppl": ppl * 2,
                },
                {
                    "step": 10,
                    "sim_time_s": sim * 0.6,
                    "tokens": 10 * tokens_per_step,
                    "val_loss": math.log(ppl * 1.5),
                    "val_ppl": ppl * 1.5,
                },  # replayed after a rollback: this one counts
                {
                    "step": 20,
                    "sim_time_s": sim,
                    "tokens": 20 * tokens_per_step,
                    "val_loss": math.log(ppl),
                    "val_ppl": ppl,
                },
            ],
        )
    _jsonl(d / "events.jsonl", list(events))
    (d / "trace.csv").write_text("time_s,worker,event\n")
    if grad_error is not None:
        _jsonl(d / "grad_error.jsonl", grad_error)
    if summary:
        data = {
            "status": status,
            "method": method,
            "failure": failure,
            "model": model,
            "seed": seed,
            "n_workers": SETTING["n_workers"],
            "steps": steps,
            "max_steps": SETTING["max_steps"],
            "tokens_committed": steps * tokens_per_step,
            "sim_time_s": sim,
            "throughput_tok_s": thr,
            "final_val_loss": math.log(ppl) if ppl else None,
            "final_val_ppl": ppl,
            "failures": 3 if failure != "none" else 0,
            "time_breakdown": breakdown
            or {"compute": sim, "comm": 0.0, "ft_overhead": 0.0, "lost_work": 0.0, "stall": 0.0, "degraded_extra": 0.0},
            "checkpoint_interval": "auto" if method == "bamboo" else 4,
        }
        if status == "failed":
            data["error"] = "RuntimeError: boom"
        (d / "summary.json").write_text(json.dumps(data))
    for f in d.rglob("*"):
        os.utime(f, (T0 - age, T0 - age))
    return d


EVENTS = [
    {"sim_time_s": 1.0, "step": 2, "kind": "fail", "worker": 1, "detail": {"trace_time_s": 0.9}},
    {"sim_time_s": 1.0, "step": 2, "kind": "rollback", "worker": 1, "detail": {}},
    {"sim_time_s": 2.0, "step": 4, "kind": "fail", "worker": 2, "detail": {"trace_time_s": 2.0}},
    {"sim_time_s": 3.1, "step": 6, "kind": "recover", "worker": 1, "detail": {"trace_time_s": 3.0}},
]


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    sweep = root / "sweeps" / "2026-01-01_00-00-00"
    make_run(sweep, "0_checkpoint_none_s0", "checkpoint", "none", 0, thr=1000, ppl=100, age=100)
    make_run(sweep, "1_checkpoint_none_s1", "checkpoint", "none", 1, thr=1200, ppl=110, age=99)
    make_run(
        sweep,
        "2_checkpoint_high_s0",
        "checkpoint",
        "high",
        0,
        thr=800,
        ppl=100,
        age=98,
        events=EVENTS,
        breakdown={
            "compute": 0.4,
            "comm": 0.1,
            "ft_overhead": 0.1,
            "lost_work": 0.2,
            "stall": 0.2,
            "degraded_extra": 0.0,
        },
    )
    make_run(
        sweep,
        "3_checkpoint_high_s1",
        "checkpoint",
        "high",
        1,
        thr=850,
        ppl=110,
        age=97,
        events=EVENTS,
        breakdown={
            "compute": 0.6,
            "comm": 0.1,
            "ft_overhead": 0.1,
            "lost_work": 0.0,
            "stall": 0.2,
            "degraded_extra": 0.0,
        },
    )
    make_run(sweep, "4_mecefo_none_s0", "mecefo", "none", 0, thr=1000, ppl=100, age=96)
    make_run(root / "2026-01-01", "old_mecefo_high", "mecefo", "high", 0, thr=500, ppl=200, age=500)
    make_run(
        sweep,
        "5_mecefo_high_s0",
        "mecefo",
        "high",
        0,
        thr=950,
        ppl=102,
        age=95,
        events=EVENTS,
        grad_error=[
            {
                "step": 3,
                "sim_time_s": 0.5,
                "rel_error": 0.3,
                "rel_error_attention": 0.5,
                "rel_error_ffn": 0.4,
                "rel_error_other": 0.1,
            },
            {
                "step": 9,
                "sim_time_s": 1.5,
                "rel_error": 0.35,
                "rel_error_attention": 0.6,
                "rel_error_ffn": 0.45,
                "rel_error_other": 0.1,
            },
        ],
    )
    make_run(root / "2026-01-02", "new_mecefo_high_failed", "mecefo", "high", 0, status="failed", age=0)
    make_run(sweep, "6_bamboo_high_s0", "bamboo", "high", 0, status="failed", age=94)
    make_run(sweep, "7_oobleck_none_s0", "oobleck", "none", 0, status="incomplete", summary=False, age=93)
    return root


@pytest.fixture(scope="module")
def table(runs_root):
    return collect([runs_root])


def _row(df, **match):
    sel = df
    for k, v in match.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"{match}: {len(sel)} rows"
    return sel.iloc[0]


# ------------------------------------------------------------------------ collect
def test_collect_lists_every_folder_with_its_status(table):
    assert len(table) == 10
    kept = table[table["selected"]]
    assert len(kept) == 8  # one row per (model, method, failure, seed, max_steps)
    assert _row(kept, method="bamboo")["status"] == "failed"
    assert _row(kept, method="bamboo")["error"] == "RuntimeError: boom"
    oob = _row(kept, method="oobleck")
    assert oob["status"] == "incomplete"
    assert oob["steps_logged"] == 7  # the committed steps of metrics.jsonl (step 5 logged twice)
    assert oob["max_steps"] == 20 and oob["seed"] == 0  # config columns from .hydra/config.yaml


def test_collect_config_and_summary_columns(table):
    r = _row(table, method="checkpoint", failure="high", seed=1)
    for col, value in SETTING.items():
        assert r[col] == value
    assert r["time_lost_work"] == 0.0 and r["time_stall"] == pytest.approx(0.2)  # time_breakdown flattened
    assert r["throughput_tok_s"] == 850
    assert r["overrides"] == "method=checkpoint,failure=high,seed=1"


def test_dedup_keeps_newest_ok_run(table):
    dups = table[(table["method"] == "mecefo") & (table["failure"] == "high")]
    assert len(dups) == 3
    kept = dups[dups["selected"]]
    assert len(kept) == 1
    assert kept.iloc[0]["status"] == "ok" and kept.iloc[0]["throughput_tok_s"] == 950
    superseded = dups[~dups["selected"]]
    assert set(superseded["status"]) == {"ok", "failed"}  # the newer failed run does not win
    assert (superseded["superseded_by"] == kept.iloc[0]["run_dir"]).all()


def test_write_and_read_table(table, tmp_path):
    paths = write_table(table, tmp_path)
    assert {p.name for p in paths.values()} == {"runs.parquet", "runs.csv", "runs_all.parquet", "runs_all.csv"}
    back = read_table(tmp_path)
    assert len(back) == 8
    assert set(back["status"]) == {"ok", "failed", "incomplete"}
    assert len(pd.read_csv(tmp_path / "runs_all.csv")) == 10


def test_collect_cli(runs_root, tmp_path, capsys):
    from analysis.collect import main

    assert main([str(runs_root), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "failed" in printed and "incomplete" in printed and "superseded" in printed
    assert (tmp_path / "runs.parquet").exists() and (tmp_path / "runs.csv").exists()


def test_replayed_rows_keep_the_last(runs_root):
    run = next(runs_root.rglob("0_checkpoint_none_s0"))
    ev = load_eval(run)
    assert list(ev["step"]) == [10, 20]
    assert ev["val_ppl"].iloc[0] == pytest.approx(150.0)  # the replayed eval of step 10
    m = committed(pd.DataFrame({"step": [0, 1, 1, 2], "loss": [3.0, 9.0, 2.0, 1.0]}))
    assert list(m["loss"]) == [3.0, 2.0, 1.0]


def test_workers_down_timeline(runs_root, tmp_path):
    run = next(runs_root.rglob("2_checkpoint_high_s0"))
    down = workers_down(run, until=5.0)
    assert list(down["time_s"]) == [0.0, 0.9, 2.0, 3.0, 5.0]  # trace times, not when the step saw them
    assert list(down["down"]) == [0, 1, 2, 1, 1]
    # without events: trace.csv, cut at `until`
    d = tmp_path / "trace_only"
    d.mkdir()
    (d / "trace.csv").write_text("time_s,worker,event\n0.5,3,fail\n1.5,3,recover\n9.0,2,fail\n")
    down = workers_down(d, until=2.0)
    assert list(down["down"]) == [0, 1, 0, 0]


# ------------------------------------------------------------------------ tables
def test_throughput_table_drop_and_resilience(table):
    t = throughput_table(table)
    assert list(t["method"]) == ["checkpoint", "mecefo"]  # bamboo failed, oobleck incomplete: no numbers
    ck, me = _row(t, method="checkpoint"), _row(t, method="mecefo")
    assert ck["n_seeds"] == 2
    assert ck["thr_none"] == pytest.approx(1100)  # mean of 1000 and 1200
    assert ck["thr_high"] == pytest.approx(825)
    # paired per seed: seed 0 1 - 800/1000 = 0.2, seed 1 1 - 850/1200; mean and Student-t interval
    pairs = [0.2, 1 - 850 / 1200]
    assert ck["drop_high"] == pytest.approx(sum(pairs) / 2)
    assert ck["drop_high_pairs"] == 2
    assert ck["drop_high_ci95"] == pytest.approx(12.7062 * abs(pairs[0] - pairs[1]) / 2, rel=1e-4)  # t(0.975, 1)
    assert ck["thr_none_ci95"] == pytest.approx(12.7062 * 100, rel=1e-4)  # sd of 1000, 1200 = 141.4 / sqrt(2)
    assert me["drop_high"] == pytest.approx(0.05)  # 1 - 950/1000 (the kept run, not the 500 duplicate)
    assert math.isnan(me["drop_high_ci95"])  # one seed: no interval
    assert ck["resilience_high"] == pytest.approx(ck["drop_high"] / 0.05)
    assert me["resilience_high"] == pytest.approx(1.0)
    # llama_tiny is not a paper model: the 1B row's relative numbers only
    assert "reference" in ck["paper_ref"]
    assert math.isnan(me["paper_thr_none"])
    assert me["paper_drop_high"] == pytest.approx(0.0298)
    assert math.isnan(ck["paper_drop_high"])  # the paper has no checkpoint-restart column


def test_perplexity_table_change(table):
    t = perplexity_table(table)
    ck, me = _row(t, method="checkpoint"), _row(t, method="mecefo")
    assert ck["ppl_none"] == pytest.approx(105) and ck["ppl_high"] == pytest.approx(105)
    assert ck["change_high"] == pytest.approx(0.0)
    assert me["ppl_high"] == pytest.approx(102)
    assert me["change_high"] == pytest.approx(0.02)
    assert me["paper_change_high"] == pytest.approx(0.0219)
    assert math.isnan(me["paper_ppl_high"])  # absolute ppl only for the paper's own models
    assert math.isnan(ck["paper_change_high"])


def test_time_breakdown_table(table):
    t = time_breakdown_table(table)
    r = _row(t, method="checkpoint", failure="high")
    assert r["time_compute"] == pytest.approx(0.5) and r["time_lost_work"] == pytest.approx(0.1)
    assert r["time_total"] == pytest.approx(1.0)
    assert r["share_stall"] == pytest.approx(0.2)


def test_paper_numbers():
    assert paper.throughput("llama_1b", "bamboo") == pytest.approx(
        {"none": 154e3, "high": 141e3, "drop_high": 0.0821, "resilience_high": 8.21 / 2.98}
    )
    assert paper.throughput("llama_7b", "oobleck")["resilience_high"] == pytest.approx(28.09 / 4.18)  # the 6.7x
    assert paper.throughput("llama_7b", "checkpoint")["drop_high"] is None
    assert paper.perplexity("llama_350m", "mecefo", "high") == pytest.approx({"ppl": 19.04, "change": 0.016})
    assert paper.perplexity("llama_1b", "mecefo", "low")["change"] == pytest.approx(15.51 / 15.49 - 1)


def test_paper_model_gets_absolute_paper_values(tmp_path):
    make_run(tmp_path, "a", "mecefo", "none", thr=1000, ppl=100, model="llama_1b")
    make_run(tmp_path, "b", "mecefo", "high", thr=990, ppl=101, model="llama_1b")
    df = collect([tmp_path])
    t = throughput_table(df)
    assert t.iloc[0]["paper_ref"] == "1B"
    assert t.iloc[0]["paper_thr_none"] == 471e3
    p = perplexity_table(df)
    assert p.iloc[0]["paper_ppl_none"] == 15.49


def test_write_tables(table, tmp_path):
    paths = write_tables(table, tmp_path)
    names = {p.name for p in paths.values()}
    assert {
        "throughput.csv",
        "throughput.md",
        "perplexity.csv",
        "perplexity.md",
        "time_breakdown.csv",
        "time_breakdown.md",
        "runs.md",
    } <= names
    md = (tmp_path / "tables" / "throughput.md").read_text()
    assert "24.58% ± 58.24%" in md and "4.92x" in md  # paired drop 0.2458 with its t interval; / 0.05
    tex = (tmp_path / "tables" / "throughput.tex").read_text()  # the same cells, for a paper
    assert "24.58\\% $\\pm$ 58.24\\%" in tex and "4.92x" in tex and "\\toprule" in tex
    assert "\\caption{Throughput per method and failure level (paper Table 2). Throughput = committed" in tex
    runs_md = (tmp_path / "tables" / "runs.md").read_text()
    assert "failed" in runs_md and "incomplete" in runs_md and "RuntimeError: boom" in runs_md


def test_empty_input(tmp_path):
    df = collect([tmp_path])
    assert df.empty
    write_table(df, tmp_path / "out")
    write_tables(df, tmp_path / "out")
    assert (tmp_path / "out" / "tables" / "throughput.md").exists()


# ------------------------------------------------------------------------ figures
@pytest.mark.slow  # the figures command over a study (~8 s): `make test-cli`
def test_figures_cli_smoke(runs_root, tmp_path):
    from analysis.figures import main

    assert main([str(runs_root), "--out", str(tmp_path)]) == 0
    figs = tmp_path / "figures"
    for name in ("ppl_vs_step", "ppl_vs_time", "throughput", "time_breakdown", "grad_error"):
        for ext in ("png", "pdf"):
            f = figs / f"{name}_llama_tiny.{ext}"
            assert f.exists() and f.stat().st_size > 1000, f
    assert (tmp_path / "tables" / "perplexity.md").exists()
    assert (tmp_path / "runs.parquet").exists()


def test_grad_error_absent_is_skipped(table):
    from analysis.plots import grad_error_curves

    assert grad_error_curves(table[table["method"] == "checkpoint"]) is None


def test_hydra_callback(runs_root, tmp_path):
    from omegaconf import OmegaConf

    from analysis.callback import CollectCallback

    sweep = next(runs_root.rglob("2026-01-01_00-00-00"))
    cb = CollectCallback(out=str(tmp_path / "analysis"), figures=False)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}})
    cb.on_multirun_start(cfg)
    cb.on_multirun_end(cfg)
    df = pd.read_csv(tmp_path / "analysis" / "runs.csv")
    assert len(df) == 8  # the sweep only: the two runs outside it are not collected
    assert (tmp_path / "analysis" / "tables" / "throughput.md").exists()


# ------------------------------------------------------------------------ notebook
NOTEBOOK = ROOT / "analysis" / "paper.ipynb"


def _notebook_env(runs_root, tmp_path):
    """A collected table of the tiny sweep, and tiny Table 2 and Table 3 sweeps built by hand."""
    from test_paper_scale import make_run as make_paper_scale_run
    from test_statistics import _cfg, _write_run

    from analysis.collect import main

    out = tmp_path / "out"
    main([str(runs_root), "--out", str(out)])
    table2 = tmp_path / "paper_table2"
    for n, (method, failure, thr) in enumerate(
        [
            ("bamboo", "none", 1000.0),
            ("bamboo", "high", 925.0),
            ("oobleck", "none", 1000.0),
            ("oobleck", "high", 880.0),
            ("mecefo", "none", 1000.0),
            ("mecefo", "high", 985.0),
        ]
    ):
        make_paper_scale_run(table2, n, method, failure, thr)
    table3 = tmp_path / "paper_table3"
    for seed in (0, 1):
        for n, (failure, ppl) in enumerate([("none", 200.0 + seed), ("high", 206.0 + seed)]):
            _write_run(
                table3 / f"s{seed}_{n}",
                _cfg(seed=seed, failure=failure),
                {"status": "ok", "final_val_ppl": ppl, "throughput_tok_s": 1.0},
            )
    return {"ANALYSIS_OUT": str(out), "ANALYSIS_TABLE2": str(table2), "ANALYSIS_TABLE3": str(table3)}


@pytest.mark.slow
def test_notebook_executes(runs_root, tmp_path, monkeypatch):
    why = (
        "needs nbclient, nbformat and ipykernel (pip install nbclient ipykernel); "
        "test_notebook_cells_run_without_jupyter checks the notebook's code without them"
    )
    nbformat = pytest.importorskip("nbformat", reason=why)
    nbclient = pytest.importorskip("nbclient", reason=why)
    pytest.importorskip("ipykernel", reason=why)
    for k, v in _notebook_env(runs_root, tmp_path).items():
        monkeypatch.setenv(k, v)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert (tmp_path / "out" / "figures" / "throughput_llama_tiny.png").exists()


@pytest.mark.slow  # every cell of the notebook (~7 s): `make test-cli`
def test_notebook_cells_run_without_jupyter(runs_root, tmp_path, monkeypatch, capsys):
    """The notebook's code, cell by cell in this process (the fast tier has no jupyter): the
    miniature's tables and figures, the paper-scale Table 2 readings and Table 3's intervals."""
    for k, v in _notebook_env(runs_root, tmp_path).items():
        monkeypatch.setenv(k, v)
    import types

    # what the notebook displays is printed, so the test can read it (with or without IPython)
    monkeypatch.setitem(sys.modules, "IPython.display", types.SimpleNamespace(Markdown=str, display=print))
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4
    scope = {"__name__": "__notebook__"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            exec(compile(source, str(NOTEBOOK), "exec"), scope)
    assert (tmp_path / "out" / "figures" / "throughput_llama_tiny.png").exists()
    assert (tmp_path / "out" / "figures" / "convergence.png").exists()
    shown = capsys.readouterr().out
    assert "7.50%" in shown  # Bamboo's drop at high in the Table 2 readings (1 - 925/1000)
    assert "+2.99%" in shown  # Table 3: MeCeFO's paired change at high, (206/200 + 207/201) / 2 - 1
    assert "no sweep at" not in shown


def test_every_registered_method_has_a_style_and_a_place_in_the_order():
    """analysis/methods.py holds one row per method of the registry: a new method without one
    would be drawn unlabelled and sorted after the others."""
    from analysis.methods import METHOD_ORDER, STYLES
    from mecefo_exp.methods import REGISTRY

    assert set(STYLES) == set(REGISTRY)
    assert sorted(METHOD_ORDER) == sorted(REGISTRY) and len(set(METHOD_ORDER)) == len(METHOD_ORDER)
    assert len({s.colour for s in STYLES.values()}) == len(STYLES)  # no two methods share a colour
    assert len({s.marker for s in STYLES.values()}) == len(STYLES)


def test_one_label_given_to_two_folders_is_one_line_not_a_merge(tmp_path, capsys):
    """`--label a=X --label a=Y` used to collect both folders under one label, averaging two sweeps
    as seeds of one configuration; it is refused, naming the label and the folder it already has."""
    from analysis.collect import main

    with pytest.raises(SystemExit) as e:
        main(["--label", f"a={tmp_path / 'x'}", "--label", f"a={tmp_path / 'y'}", "--out", str(tmp_path / "out")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("python -m analysis.collect: error")]
    assert e.value.code == 2 and len(err) == 1 and "the label 'a' already names" in err[0], err
