"""RESULTS.md's published tables are tied to the code that made them.

Each study in RESULTS.md states the fingerprint of its corpus and of its clock. These tests
recompute both from the current code (each configuration of the study run numerics-free for one
step) and fail when they differ: a change to the corpus or to what the simulated clock charges
must regenerate the tables (`make results`) or mark them superseded, in the same commit.
"""

import pytest

from analysis import published

TEXT = published.RESULTS.read_text()
STATED = published.published_fingerprints(TEXT)


def test_every_study_states_its_fingerprints_and_every_marked_table_names_a_known_study():
    assert sorted(STATED) == sorted(published.STUDIES)
    blocks = published.table_blocks(TEXT)
    assert {b.study for b in blocks} == set(published.STUDIES)
    assert published.marker_problems(TEXT, list(published.STUDIES)) == []
    assert published.marker_problems(TEXT, list(published.STUDIES)) == []
    for block in blocks:
        assert block.text.startswith("| ") and block.text.count("\n") >= 2, f"{block.study} {block.file}: no table"


#: studies whose fingerprint counts the FLOPs of many shapes or runs many configurations (15-35 s
#: each in a fresh clone): slow tier, which .ci/run also runs (make test-fingerprints)
SLOW_FINGERPRINTS = ("ablation_memory", "llama3_405b", "decision_map", "paper_table2")


@pytest.mark.parametrize(
    "study",
    [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_FINGERPRINTS else s for s in sorted(published.STUDIES)],
)
def test_published_fingerprints_match_the_current_code(study):
    fresh = published.fingerprints(published.STUDIES[study])
    stated = STATED[study]
    assert (stated["data"], stated["clock"]) == (fresh.data, fresh.clock), mismatch_message(study, stated, fresh)


def mismatch_message(study, stated, fresh):
    """Why the fingerprints differ. A different corpus is most often this machine's doing (other
    package versions than the pinned ones): the message names the cause, and regenerating the
    tables would be wrong. A different clock is the code's: regenerate or mark superseded."""
    from mecefo_exp.local_corpus import why_fingerprint_differs

    lines = [
        f"RESULTS.md's {study} tables were made with data {stated['data']} and clock {stated['clock']}; the "
        f"current code gives data {fresh.data} and clock {fresh.clock}."
    ]
    if fresh.data != stated["data"]:
        lines.append(why_fingerprint_differs(fresh.data, stated["data"]) + ".")
    if fresh.clock != stated["clock"]:
        lines.append(
            f"The clock differs (per configuration: {fresh.clocks}): regenerate the tables (make results) "
            "or mark them superseded."
        )
    return "\n".join(lines)


def test_a_different_corpus_is_explained_not_sent_to_regenerate(monkeypatch):
    from mecefo_exp import local_corpus

    stated = {"data": local_corpus.REFERENCE_FINGERPRINT, "clock": "a2c873f57484"}
    versions = {**local_corpus.REFERENCE_VERSIONS, "sympy": "1.15.0"}
    monkeypatch.setattr(local_corpus, "package_versions", lambda packages: {n: versions[n] for n in packages})
    wrong_data = published.Fingerprints("0123456789ab", stated["clock"], {})
    message = mismatch_message("paper_mini", stated, wrong_data)
    assert "sympy 1.15.0 (the reference corpus: 1.14.0)" in message
    assert "regenerate" not in message.lower() and "make results" not in message
    wrong_clock = published.Fingerprints(stated["data"], "ba9876543210", {"a/mecefo": "ba9876543210"})
    assert "regenerate the tables (make results)" in mismatch_message("paper_mini", stated, wrong_clock)


def test_a_changed_clock_changes_the_study_fingerprint():
    clocks = {"a/mecefo": "0123456789ab", "a/bamboo": "ba9876543210"}
    assert published.combined(clocks) != published.combined({**clocks, "a/mecefo": "0123456789ac"})
    assert published.combined(clocks) == published.combined(dict(reversed(list(clocks.items()))))


def test_rewrite_replaces_marked_tables_and_fingerprint_lines_only():
    text = "\n".join(
        [
            "intro",
            "- **Fingerprints** (`demo`): data `aaa`, clock `bbb`; Python 3.0, torch 0.1.",
            "<!-- table demo t.md rows=keep -->",
            "| a | b |",
            "|---|---|",
            "| keep | 1 |",
            "| keep | 2 |",
            "",
            "| untouched | table |",
        ]
    )
    fresh = {"demo": {"t.md": "# Title\n\n| a | b |\n|---|---|\n| keep | 3 |\n| drop | 4 |\n"}}
    prints = {"demo": published.Fingerprints("ccc", "ddd", {})}
    out = published.rewrite(text, fresh, prints)
    assert "| keep | 3 |" in out and "| drop | 4 |" not in out and "| keep | 1 |" not in out
    assert "| untouched | table |" in out and out.startswith("intro\n")
    assert published.published_fingerprints(out)["demo"]["data"] == "ccc"
    assert published.published_fingerprints(out)["demo"]["clock"] == "ddd"


def test_every_number_in_the_readme_results_appears_in_results_md():
    """README's results summary quotes RESULTS.md, never a number of its own."""
    import re

    readme = (published.ROOT / "README.md").read_text()
    section = readme[readme.index("## Results") :]
    section = section[: section.index("\n## ", 1)]
    numbers = set(re.findall(r"\d+\.\d+%?|\d+(?:\.\d+)?x\b", section))
    assert len(numbers) > 20
    missing = sorted(n for n in numbers if n not in TEXT)
    assert not missing, f"README's results cite numbers RESULTS.md does not have: {missing}"


def _regenerate_with(tmp_path, monkeypatch, text, studies=("paper_mini",)):
    """`regenerate` on `text` as RESULTS.md, each study's runs replaced by the tables RESULTS.md
    marks (so a correctly marked file is identical); (exit code, calls to run a study)."""
    results = tmp_path / "RESULTS.md"
    results.write_text(text)
    ran = []

    def fake(study, out, sweep=None):
        ran.append(study.name)
        tables = {b.file: b.text for b in published.table_blocks(TEXT) if b.study == study.name and not b.rows}
        return tables, published.Fingerprints(STATED[study.name]["data"], STATED[study.name]["clock"], {})

    monkeypatch.setattr(published, "regenerate", fake)
    try:
        code = published.main(["regenerate", *studies, "--out", str(tmp_path / "out"), "--results", str(results)])
    except SystemExit as e:
        code = e.code
    return code, ran


def test_a_misspelt_or_missing_table_marker_is_an_error_before_anything_runs(tmp_path, monkeypatch, capsys):
    assert _regenerate_with(tmp_path, monkeypatch, TEXT) == (0, ["paper_mini"])  # as committed: identical
    capsys.readouterr()
    cases = {
        "<!-- table paper_mimi throughput.md -->": "unknown study 'paper_mimi'",
        "<!-- tabel paper_mini throughput.md -->": "not a table marker",
        "<!-- table paper_mini throughput.md rows=( -->": "rows=( is not a regular expression",
    }
    for marker, says in cases.items():
        code, ran = _regenerate_with(
            tmp_path, monkeypatch, TEXT.replace("<!-- table paper_mini throughput.md -->", marker)
        )
        err = capsys.readouterr().err
        assert code == 2 and ran == [] and says in err, (marker, code, ran, err)
        assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    # both of the study's markers deleted: the study has no marked table left
    gone = "\n".join(line for line in TEXT.split("\n") if not line.startswith("<!-- table paper_mini "))
    code, ran = _regenerate_with(tmp_path, monkeypatch, gone)
    err = capsys.readouterr().err
    assert code == 2 and ran == [] and "no table of study paper_mini is marked" in err, err
