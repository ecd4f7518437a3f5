"""Our replay of the Oobleck artifact against the artifact itself on generated node traces.

tests/fixtures/artifact_generated/ holds 120 seeded traces of mecefo_exp/replay/spot_traces.generate
(gen_NNNN), 100 of its generate_extended (ext_NNNN: clusters past 30 nodes, collapses to a few nodes
and back, removals faster than a restart, same-millisecond events, 10-12 h traces), the artifact's two
spot-instance traces, and the samples/s its own simulators give on each, run unmodified
(scripts/artifact_reference.py). Every cell must agree within 2% with the artifact's behaviours on, or
be in known_gaps.csv with what is known of its cause; a listed cell that has come to agree fails too, so
the list cannot hide progress (regenerate it with
`python -m mecefo_exp.replay.differential --write-gaps tests/fixtures/artifact_generated/known_gaps.csv`).
The fast tier runs 2 generated traces, 5 extended ones (one of each regime) and the artifact's two (80
cells); the slow tier all of them.
"""

import pytest

from mecefo_exp.replay import differential as D


def check(generated, extended):
    ref = D.reference()
    cells = D.default_cells(ref, generated, extended)
    traces = {c[0] for c in cells}
    assert {"scale_gcp-trace", "scale_p3-trace"} <= traces
    assert sum(t.startswith("gen_") for t in traces) == (generated or 120)
    assert sum(t.startswith("ext_") for t in traces) == (extended or 100)
    assert {(c[1], c[2]) for c in cells} == {(m, s) for m in D.MODELS for s in D.SYSTEMS}
    ours = D.run_cells(cells, jobs=2)
    differ = {c for c in cells if not D.agrees(c, ours[c], ref[c])}
    gaps = {c: why for c, why in D.known_gaps().items() if c in set(cells)}
    unlisted = sorted(differ - set(gaps))
    assert not unlisted, [(c, ours[c], ref[c]["samples_per_s"]) for c in unlisted[:10]]
    now_agree = sorted(set(gaps) - differ)
    assert not now_agree, f"{len(now_agree)} listed gaps agree now: regenerate known_gaps.csv ({now_agree[:5]})"
    print(f"{len(cells) - len(differ)} of {len(cells)} cells agree; {len(differ)} listed gaps")


def test_every_generated_cell_agrees_with_the_artifact_or_is_a_listed_gap():
    # 9 traces: 80 cells (Bamboo's GPT-3 cells of the extended traces are left out); `make test-fingerprints`
    # replays all 220 traces
    check(generated=2, extended=5)


@pytest.mark.slow
def test_all_generated_and_extended_traces():
    check(generated=None, extended=None)


@pytest.mark.parametrize(
    "cell,old",
    [
        # a node is added at 5134 s and becomes usable at 5179 s, the instant another is removed, while the job is
        # stopped: the artifact hears the removal first, which opens the rendezvous the node joins (one timeout);
        # hearing the node first armed a second timeout that stopped the job again (ours was 21% low)
        (("ext_0003", "bert_large", "oobleck", "freq"), 77.796),
        # 21 of 22 nodes are removed during Varuna's 581 s start-up: the first configuration holds 1 node and
        # stops the job until nodes arrive (ours trained on the 22 from 1098 s: train start 1098 s, not 3072 s)
        (("ext_0006", "gpt3_6_7b", "varuna", "freq"), 1.4782),
        # Bamboo's step in flight is slowed 1.5x by a removal at 1657 s and ends at 1710.78 s; a second removal
        # at 1686 s leaves that end alone (ours took the 29 s since as unslowed work: 1696.28 s, 3% high)
        (("ext_0002", "bert_large", "bamboo", "freq"), 118.41),
        # Varuna stopped while a checkpoint write passed three restart timeouts: they all fire then (ours left one
        # pending in the past and the run stopped with "cannot make progress")
        (("ext_0019", "gpt3_6_7b", "varuna", "freq"), None),
        # a node is added at 11128 s and removed at 11173 s, the instant it would become usable: the artifact pops
        # the removal first (kind 2 before 4) and never counts it as waiting; ours heard it usable, then lost, and
        # its count of waiting nodes re-formed Bamboo's pipelines once too often (ours was 5.8% high)
        (("ext_0008", "bert_large", "bamboo", "freq"), 78.806),
        # a Varuna restart completes during a checkpoint write (its first step is lost to the next removal), and
        # the next restart queues its first step a whole step later; ours queued it shortened by the earlier
        # restart's head start, the replayed heap's storage order changed and a checkpoint test with it (30% high)
        (("ext_0092", "bert_large", "varuna", "freq"), 46.8168),
        # a node added during Bamboo's rendezvous and removed before it became usable was never a member of it
        # (it collects usable nodes only): the rendezvous completes at its timeout; ours started it over for that
        # removal (2.9% high; gen_0014 4.9% low)
        (("ext_0058", "bert_large", "bamboo", "freq"), 56.3527),
        (("gen_0014", "bert_large", "bamboo", "freq"), 82.2493),
        # during the rendezvous of a fatal removal, the next stage's node is removed: nobody holds the fatal
        # node's stage any more and the artifact does nothing; ours called it a second fatal failure, whose
        # extra timeout found no rendezvous and stopped the job (8.4% low)
        (("ext_0063", "bert_large", "bamboo", "freq"), 45.3273),
    ],
)
def test_the_behaviours_the_extended_traces_showed(cell, old):
    ref = D.reference()
    _, ours, _ = D.run_cell(cell)
    assert D.agrees(cell, ours, ref[cell]), (ours, ref[cell]["samples_per_s"])
    assert old is None or abs(ours / old - 1) > 0.02  # what the replay gave before (None: it raised)
