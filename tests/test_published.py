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
    for block in blocks:
        assert block.text.startswith("| ") and block.text.count("\n") >= 2, f"{block.study} {block.file}: no table"


#: studies whose fingerprint counts the FLOPs of many shapes (35 s and 13 s in a fresh clone): slow
#: tier, which .ci/run also runs
SLOW_FINGERPRINTS = ("ablation_memory", "llama3_405b")


@pytest.mark.parametrize("study", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_FINGERPRINTS else s
                                   for s in sorted(published.STUDIES)])
def test_published_fingerprints_match_the_current_code(study):
    fresh = published.fingerprints(published.STUDIES[study])
    stated = STATED[study]
    assert (stated["data"], stated["clock"]) == (fresh.data, fresh.clock), (
        f"RESULTS.md's {study} tables were made with data {stated['data']} and clock {stated['clock']}; the "
        f"current code gives data {fresh.data} and clock {fresh.clock} (per configuration: {fresh.clocks}). "
        f"Regenerate them (make results) or mark them superseded.")


def test_a_changed_clock_changes_the_study_fingerprint():
    clocks = {"a/mecefo": "0123456789ab", "a/bamboo": "ba9876543210"}
    assert published.combined(clocks) != published.combined({**clocks, "a/mecefo": "0123456789ac"})
    assert published.combined(clocks) == published.combined(dict(reversed(list(clocks.items()))))


def test_rewrite_replaces_marked_tables_and_fingerprint_lines_only():
    text = "\n".join([
        "intro",
        "- **Fingerprints** (`demo`): data `aaa`, clock `bbb`; Python 3.0, torch 0.1.",
        "<!-- table demo t.md rows=keep -->",
        "| a | b |", "|---|---|", "| keep | 1 |", "| keep | 2 |",
        "",
        "| untouched | table |",
    ])
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
    section = readme[readme.index("## Results"):]
    section = section[:section.index("\n## ", 1)]
    numbers = set(re.findall(r"\d+\.\d+%?|\d+(?:\.\d+)?x\b", section))
    assert len(numbers) > 20
    missing = sorted(n for n in numbers if n not in TEXT)
    assert not missing, f"README's results cite numbers RESULTS.md does not have: {missing}"
