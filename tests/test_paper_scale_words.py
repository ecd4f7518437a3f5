"""The failure readings of analysis/paper_scale.py in words, beside their short labels."""

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis import paper_scale  # noqa: E402


def test_every_reading_label_has_words():
    words = {
        paper_scale.reading_label(p, u, r, 60.0): paper_scale.reading_words(paper_scale.reading_label(p, u, r, 60.0))
        for p in paper_scale.PROCESS_ORDER
        for u in (1, 8)
        for r in paper_scale.REPAIR_ORDER
    }
    assert words["per_worker/1gpu/fixed"] == "per unit, 1-GPU units, fixed repair"
    assert words["cluster/8gpu/replace 60s"] == "cluster-wide, 8-GPU units, a spare after 60 s"
    assert words["per_worker/8gpu/tick"] == "per unit, 8-GPU units, repair at the next tick"
    assert len(set(words.values())) == len(words)  # no two readings read alike
    assert all("/" not in w and "_" not in w for w in words.values())
    assert paper_scale.reading_words(paper_scale.NO_READING) == "failure-free (no reading)"
    assert paper_scale.reading_words("cluster/1gpu/replace 900s") == "cluster-wide, 1-GPU units, a spare after 900 s"


def test_which_reading_shows_the_words_and_keeps_the_labels():
    readings = pd.DataFrame(
        [
            {"model": "llama_350m", "reading": "per_worker/1gpu/fixed", "reproduces": "yes"},
            {"model": "llama_350m", "reading": "cluster/8gpu/replace 60s", "reproduces": "no"},
        ]
    )
    matrix, counts, winners = paper_scale.which_reading(readings)
    text = paper_scale.which_markdown(matrix, counts, winners)
    assert "`per_worker/1gpu/fixed` (per unit, 1-GPU units, fixed repair)" in text
    row = next(line for line in text.splitlines() if line.startswith("| cluster/8gpu/replace 60s"))
    assert "| cluster-wide, 8-GPU units, a spare after 60 s |" in row
    assert list(matrix["reading"]) == ["per_worker/1gpu/fixed", "cluster/8gpu/replace 60s"]  # the CSV keeps the keys
