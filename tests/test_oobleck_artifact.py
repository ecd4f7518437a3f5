"""The Oobleck artifact's model inside the harness: node traces, the throughput-table clock, and
our Varuna (checkpoint), Oobleck and Bamboo on a hand-worked trace.

The hand-worked trace: 4 nodes at t=0, usable after 1 s; node2 removed at 10 s, node4 at 20 s;
the last row at 40 s is the hard stop. A step is 100 samples; the table gives 40 / 30 / 20
samples/s on 4 / 3 / 2 nodes, so a step takes 2.5 / 3.333 / 5 s. Every number below is worked
out by hand in the test's comments.
"""

import json

import pytest
from helpers.settings import NODE_TRACE_ON_A_TABLE

from conftest import compose_cfg
from mecefo_exp.config import ConfigError
from mecefo_exp.failures import FAIL, RECOVER, TraceError
from mecefo_exp.failures.nodes import read_node_trace
from mecefo_exp.replay.node_readiness import ArtifactReadiness

TABLE = "{4: 40, 3: 30, 2: 20}"
COMMON = NODE_TRACE_ON_A_TABLE

#: Bamboo with pipelines and idle spares (the Oobleck authors' model; its options are the variant's)
PIPELINES = "method.variant=mecefo_exp.replay.bamboo_pipelines:BambooPipelines"


def trace_file(tmp_path, rows):
    path = tmp_path / "nodes.csv"
    path.write_text("".join(f"{t},{verb},{name}\n" for t, verb, name in rows))
    return path


@pytest.fixture
def two_removals(tmp_path):
    rows = [(0, "add", f"node{i}") for i in range(1, 5)] + [
        (10000, "remove", "node2"),
        (20000, "remove", "node4"),
        (40000, "remove", "node1"),
    ]
    return trace_file(tmp_path, rows)


def run(tmp_path, trace, *overrides):
    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(COMMON + [f"failure.path={trace}", f"+hardware.tables.default={TABLE}", *overrides])
    summary = Experiment(cfg, tmp_path / "run").run()
    assert summary["status"] == "ok"
    return summary, tmp_path / "run"


def test_oobleck_by_hand(tmp_path, two_removals):
    # start: nodes ready at 1 s + a 1 s reconfiguration = 2 s. 4 nodes: steps end 4.5, 7, 9.5; the
    # step in flight at 10 s is lost; reconfigure to 11; 3 nodes: 14.33, 17.67, lost at 20;
    # reconfigure to 21; 2 nodes: 26, 31, 36 (41 > the hard stop at 40). 8 steps in [2, 36].
    s, _ = run(
        tmp_path, two_removals, "method=oobleck", "method.reconfigure_s=1", "method.charge_initial_checkpoint=false"
    )
    w = s["window"]
    assert s["steps"] == 8 and w["credited_samples"] == 800
    assert w["train_start_s"] == pytest.approx(2.0) and w["last_step_end_s"] == pytest.approx(36.0)
    assert w["samples_per_s"] == pytest.approx(800 / 34)
    # ideal: 40/s on [2, 10] + 30/s on [10, 20] + 20/s on [20, 36] = 320 + 300 + 320
    assert w["ideal_samples"] == pytest.approx(940) and w["goodput_over_ideal"] == pytest.approx(800 / 940)


#: Varuna on the hand-worked traces: a 3 s restart on the survivors, a 0.5 s checkpoint after a
#: removal's first step and every 2 completed steps
VARUNA = [
    "method=checkpoint",
    "method.restart_on=survivors",
    "method.checkpoint_interval=2",
    "method.restart_s=3",
    "method.checkpoint_after_failure=true",
    "method.charge_initial_checkpoint=false",
    "hardware.checkpoint_s=0.5",
]
#: and with the artifact's behaviours, its heap in time order
VARUNA_BY_HAND = [
    *VARUNA,
    "method.variant=mecefo_exp.replay.varuna:VarunaArtifact",
    "+method.variant_options.storage_order=false",
]


def test_varuna_by_hand(tmp_path, two_removals):
    # start: ready at 1 s + a 3 s restart = 4 s; the step-0 state costs no write. 4 nodes: steps
    # end 6.5, 9 (then a checkpoint of step 2: 0.5 s, to 9.5); the step in flight at 10 is lost;
    # restart 3 s on the 3 survivors (13); nothing to roll back; step 2 ends 16.33, then the
    # checkpoint after a failure (16.83); lost at 20; restart to 23; 2 nodes: step 3 ends 28
    # (+0.5: 28.5), step 4 at 33.5, step 5 at 38.5 (+0.5, its cadence checkpoint); 44 > 40.
    s, run_dir = run(
        tmp_path,
        two_removals,
        *VARUNA,
    )
    w = s["window"]
    assert s["steps"] == 6 and s["rollbacks"] == 2 and s["lost_steps"] == 0
    assert w["train_start_s"] == pytest.approx(4.0) and w["last_step_end_s"] == pytest.approx(38.5)
    assert w["samples_per_s"] == pytest.approx(600 / 34.5)
    events = [json.loads(line) for line in open(run_dir / "events.jsonl")]
    assert [e["detail"]["step"] for e in events if e["kind"] == "checkpoint"] == [0, 2, 3, 4, 6]


def test_bamboo_by_hand(tmp_path, two_removals):
    # start: ready at 1 s + a 1 s restart = 2 s. 4 nodes: 4.5, 7, 9.5; node2 fails 0.5 s into
    # step 3: its shadow covers, the remaining 2 s run 1.5x slower (13); one degraded step, so a
    # rebalance (2 s, to 15) on 3 nodes: 18.33; node4 fails 1.67 s into the next step: the rest
    # (1.67 s) at 1.5x ends at 22.5; rebalance to 24.5 on 2 nodes: 29.5, 34.5, 39.5. 9 steps.
    s, _ = run(
        tmp_path,
        two_removals,
        "method=bamboo",
        "method.fallback_slowdown=1.5",
        "method.rebalance_after_steps=1",
        "method.rebalance_stall_s=2",
        "method.restart_s=1",
        "method.charge_initial_checkpoint=false",
    )
    w = s["window"]
    assert s["steps"] == 9 and s["rebalances"] == 2 and s["fatal"] == 0 and s["survived_interruptions"] == 2
    assert w["train_start_s"] == pytest.approx(2.0) and w["last_step_end_s"] == pytest.approx(39.5)
    assert w["samples_per_s"] == pytest.approx(900 / 37.5)


def test_a_node_added_mid_run_joins_only_when_the_policy_says(tmp_path):
    rows = [
        (0, "add", "a"),
        (0, "add", "b"),
        (0, "add", "c"),
        (10000, "remove", "b"),
        (12000, "add", "d"),
        (30000, "remove", "c"),
        (50000, "remove", "a"),
    ]
    trace = trace_file(tmp_path, rows)
    table = [
        "+hardware.tables.default={3: 30, 2: 20, 1: 10}",
        "cluster.n_workers=3",
        "method=oobleck",
        "method.reconfigure_s=1",
        "method.charge_initial_checkpoint=false",
    ]

    def step_costs(policy):
        _, run_dir = run(tmp_path / policy, trace, *table, f"method.admit_nodes={policy}")
        rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
        return [r["step_cost_s"] for r in rows if 14 < r["sim_time_s"] - r["step_cost_s"] and r["sim_time_s"] < 30]

    # d is usable at 13 s: admitted at once it makes 3 nodes (3.33 s steps); waiting for the next
    # failure's reconfiguration (the artifact's Oobleck), the job stays on 2 nodes (5 s steps)
    admitted, waiting = step_costs("on_recover"), step_costs("next_reconfiguration")
    assert admitted and all(c == pytest.approx(100 / 30) for c in admitted)
    assert waiting and all(c == pytest.approx(100 / 20) for c in waiting)


def test_node_trace_rules(tmp_path):
    rows = [
        (0, "add", "a"),
        (0, "add", "b"),
        (5000, "remove", "a"),
        (6000, "add", "c"),
        (7000, "remove", "c"),
        (8000, "add", "e"),
        (20000, "remove", "b"),
    ]
    nodes = read_node_trace(str(trace_file(tmp_path, rows)), 2, ready_s=2.0)
    assert nodes.stop_s == 20.0 and nodes.rows[-1] == (20.0, "remove")  # the last row is the hard stop, not applied
    # a fails at 5; c takes its slot at 6 but is removed before it is ready (8): it never joins;
    # e takes the slot at 8, usable at 10
    assert [(e.time, e.worker, e.kind) for e in nodes.events] == [(5.0, 0, FAIL), (10.0, 0, RECOVER)]
    assert nodes.start_s == 2.0 and nodes.initial_down == set()
    # with the artifact's readiness rule, c's removal is a failure of its empty slot
    strict = read_node_trace(str(trace_file(tmp_path, rows)), 2, ready_s=2.0, readiness=ArtifactReadiness())
    assert [(e.time, e.worker, e.kind) for e in strict.events] == [(5.0, 0, FAIL), (7.0, 0, FAIL), (10.0, 0, RECOVER)]


def test_a_node_removed_at_its_own_ready_instant_never_joins_under_the_artifacts_rules(tmp_path):
    # c is added at 6 s and removed at 8 s, the instant it would become usable: the artifact pops the
    # removal before the ready event (kind 2 before 4, B:1059, B:1159-1162; V and O alike), so c never
    # joins and never counts as waiting; with the artifact's readiness rule its removal is a failure of its
    # empty slot, with no recovery before it. Under the harness's own rule both events are kept.
    rows = [(0, "add", "a"), (0, "add", "b"), (5000, "remove", "a"), (6000, "add", "c"), (8000, "remove", "c")]
    rows.append((20000, "remove", "b"))
    strict = read_node_trace(str(trace_file(tmp_path, rows)), 2, ready_s=2.0, readiness=ArtifactReadiness())
    assert [(e.time, e.worker, e.kind) for e in strict.events] == [(5.0, 0, FAIL), (8.0, 0, FAIL)]
    default = read_node_trace(str(trace_file(tmp_path, rows)), 2, ready_s=2.0)
    assert [(e.time, e.worker, e.kind) for e in default.events] == [(5.0, 0, FAIL), (8.0, 0, RECOVER), (8.0, 0, FAIL)]


@pytest.mark.parametrize(
    "rule,message",
    [
        ("mecefo_exp.replay.nowhere:X", "cannot be imported as package.module:Class"),
        ("mecefo_exp.failures.nodes:NodeTrace", "is not a subclass of mecefo_exp.failures.nodes.Readiness"),
    ],
)
def test_a_readiness_rule_that_is_not_one_is_refused_in_one_line(tmp_path, rule, message):
    from mecefo_exp.api import validate_run

    path = trace_file(tmp_path, [(0, "add", "a"), (0, "add", "b"), (20000, "remove", "b")])
    cfg = compose_cfg(
        ["failure=nodes", f"failure.path={path}", "cluster.n_workers=2", f"failure.node_readiness={rule}"]
    )
    with pytest.raises(ConfigError, match=message) as e:
        validate_run(cfg)
    assert str(e.value).startswith("failure.node_readiness") and "\n" not in str(e.value)


@pytest.mark.parametrize("stored,rule", [(True, "mecefo_exp.replay.node_readiness:ArtifactReadiness"), (False, None)])
def test_a_folder_written_with_unready_removals_fail_keeps_its_rule(stored, rule):
    """An older version stored `failure.unready_removals_fail`; the rule that says the same now is named."""
    from omegaconf import OmegaConf

    from mecefo_exp.config.schema import typed_config

    old = OmegaConf.create(OmegaConf.to_container(compose_cfg(["failure=nodes"]), resolve=False))
    del old.failure["node_readiness"]
    old.failure["unready_removals_fail"] = stored
    typed = typed_config(old)
    assert typed.failure.node_readiness == rule and "unready_removals_fail" not in typed.failure


def test_node_traces_that_start_late_and_grow(tmp_path):
    # nothing at t=0; a and b at 100 s, usable at 102; the first rendezvous takes 3 s (to 105): c,
    # added at 102.5 and usable at 104.5, is in it; d (usable at 110) joins later in the third slot,
    # which was empty at the start; slot 3 never holds a node.
    rows = [
        (100_000, "add", "a"),
        (100_000, "add", "b"),
        (102_500, "add", "c"),
        (108_000, "add", "d"),
        (200_000, "remove", "a"),
    ]
    nodes = read_node_trace(str(trace_file(tmp_path, rows)), 4, ready_s=2.0, job_start_s=3.0)
    assert nodes.start_s == 102.0 and nodes.initial_down == {3}
    assert [(e.time, e.worker, e.kind) for e in nodes.events] == [(110.0, 3, RECOVER)]
    # a slot freed during the start-up (to 112 s) is not reused before the job starts: b's removal at
    # 104 s is still b's failure, heard after the start, and c (usable at 106.5, in the start) takes
    # a fresh slot
    rows = [
        (100_000, "add", "a"),
        (100_000, "add", "b"),
        (104_000, "remove", "b"),
        (104_500, "add", "c"),
        (300_000, "remove", "a"),
    ]
    nodes = read_node_trace(str(trace_file(tmp_path, rows)), 3, ready_s=2.0, job_start_s=10.0)
    assert [(e.time, e.worker, e.kind) for e in nodes.events] == [(104.0, 1, FAIL)]
    assert nodes.initial_down == set()


def test_node_trace_refusals_name_the_row(tmp_path):
    def refused(rows, n, match):
        with pytest.raises(TraceError, match=match) as e:
            read_node_trace(str(trace_file(tmp_path, rows)), n, 1.0)
        assert "\n" not in str(e.value)

    refused(
        [(0, "add", "a"), (1, "remove", "a"), (2, "add", "a"), (9, "remove", "x")],
        1,
        "line 3: node 'a' was added before",
    )
    refused([(0, "add", "a"), (2, "add", "b"), (9, "add", "z")], 1, "line 2: .*all 1 worker slots.*cluster.n_workers=2")
    refused(
        [(0, "add", "a"), (2, "remove", "q"), (9, "add", "z")], 1, "line 2: node 'q' is removed but was never added"
    )
    refused(
        [(0, "add", "a"), (2, "remove", "a"), (3, "remove", "a"), (9, "add", "z")], 1, "line 3: .*was removed before"
    )
    refused([(5, "add", "a"), (5, "add", "b")], 2, "no node is added before the last row")


def test_a_trace_whose_nodes_are_all_gone_before_the_job_starts_is_refused(tmp_path):
    """Every node is removed before the first rendezvous completes (before it is usable, or after
    it but during the start-up): the job would start with no node. It used to train hundreds of
    steps against an ideal of 0 samples (MeCeFO) or crash dividing by zero (checkpoint)."""
    for rows in (
        [(0, "add", "a"), (0, "add", "b"), (10, "remove", "a"), (20, "remove", "b"), (9_000_000, "add", "c")],
        [(0, "add", "a"), (1_500, "remove", "a"), (9_000_000, "add", "c")],
    ):
        with pytest.raises(TraceError, match="every node usable by the first rendezvous .* is removed before it") as e:
            read_node_trace(str(trace_file(tmp_path, rows)), 2, ready_s=1.0, job_start_s=10.0)
        assert "\n" not in str(e.value)
    # one node left at the start is a job
    rows = [(0, "add", "a"), (0, "add", "b"), (1_500, "remove", "a"), (9_000_000, "add", "c")]
    assert read_node_trace(str(trace_file(tmp_path, rows)), 2, ready_s=1.0, job_start_s=10.0).initial_down == set()


def test_an_out_of_memory_table_is_refused_in_one_line():
    from mecefo_exp.api import validate_run  # the config's checks and the clock's it names

    cfg = compose_cfg(["scenario=oobleck_artifact/gpt3_2_7b", "method=bamboo"])
    with pytest.raises(
        ConfigError, match=r"method=bamboo cannot run here: hardware.tables.bamboo is 0 \(out of memory\)"
    ):
        validate_run(cfg)


def test_a_table_that_runs_out_of_memory_mid_run_stalls_until_the_next_reconfiguration(tmp_path, two_removals):
    # as test_oobleck_by_hand, but 3 nodes do not fit (an entry of 0): the steps on [11, 20] never
    # complete (a 1e9 s step, interrupted by the next removal); 2 nodes run again: 26, 31, 36.
    s, run_dir = run(
        tmp_path,
        two_removals,
        "method=oobleck",
        "method.reconfigure_s=1",
        "method.charge_initial_checkpoint=false",
        "hardware.tables.default={4: 40, 3: 0, 2: 20}",
    )
    w = s["window"]
    assert s["steps"] == 6 and w["credited_samples"] == 600 and w["last_step_end_s"] == pytest.approx(36.0)
    assert w["ideal_samples"] == pytest.approx(40 * 8 + 20 * 16)  # no throughput on [10, 20]


def test_the_scenario_presets_give_the_artifact_constants_to_a_single_run():
    cfg = compose_cfg(["scenario=oobleck_artifact/gpt3_6_7b", "method=checkpoint"])
    assert (cfg.method.checkpoint_interval, cfg.method.restart_s, cfg.method.restart_on) == (10, 581.0, "survivors")
    assert cfg.hardware.checkpoint_s == 120.0 and cfg.cluster.n_workers == 30
    assert cfg.failure.path.endswith("oobleck_artifact/10m.csv")
    cfg = compose_cfg(["scenario=oobleck_artifact/gpt3_6_7b", "method=oobleck", "method.reconfigure_s=3"])
    assert cfg.method.reconfigure_s == 3  # typed on the command line: wins over the preset
    assert compose_cfg(["method=checkpoint"]).method.restart_on == "spares"  # no scenario: today's defaults


@pytest.mark.parametrize(
    "model,method,trace,expected",
    [
        ("gpt3_6_7b", "oobleck", "10m", 3.546095),
        ("gpt3_6_7b", "checkpoint", "6h", 4.144960),
        ("bert_large", "bamboo", "6h", 77.037770),
    ],
)
def test_three_cells_agree_with_the_artifact_when_its_behaviour_is_on(tmp_path, model, method, trace, expected):
    """GPT-3 6.7B: the artifact's Oobleck at 10 minutes (the abstract's 13.9x cell) and Varuna at 6 hours;
    BERT-large: Bamboo at 6 hours, whose first removal is an idle spare."""
    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(
        [
            f"scenario=oobleck_artifact/{model}",
            f"method={method}",
            f"scenario.trace={trace}",
            "scenario.quirks=true",
            "hardware.timing_model=null",
            "trainer.progress=none",
        ]
    )
    summary = Experiment(cfg, tmp_path / "run").run()
    assert summary["window"]["samples_per_s"] == pytest.approx(expected, rel=2e-3)


def test_the_analysis_sets_our_cells_beside_the_artifacts(tmp_path):
    from analysis.oobleck_artifact import analyze
    from mecefo_exp.run.experiment import Experiment

    for method, quirks in (("oobleck", "true"), ("checkpoint", "false")):
        cfg = compose_cfg(
            [
                "scenario=oobleck_artifact/gpt3_6_7b",
                f"method={method}",
                "scenario.trace=6h",
                f"scenario.quirks={quirks}",
                "hardware.timing_model=null",
                "trainer.progress=none",
            ]
        )
        Experiment(cfg, tmp_path / "sweep" / f"{method}_{quirks}").run()
    analyze([tmp_path / "sweep"], tmp_path / "out", figures=False, verbose=False)
    import pandas as pd

    table = pd.read_csv(tmp_path / "out" / "oobleck_artifact_gpt3_6_7b.csv").set_index(["trace", "system"])
    oobleck, varuna = table.loc[("6h", "Oobleck")], table.loc[("6h", "Varuna")]
    assert oobleck.ours_artifact_behaviour == pytest.approx(4.329178, rel=1e-4)
    assert oobleck.artifact == "4.32917800" or float(oobleck.artifact) == pytest.approx(4.329178)
    assert oobleck.within_2pct == "yes" and varuna.ours == pytest.approx(4.0135, rel=1e-3)
    ratios = pd.read_csv(tmp_path / "out" / "oobleck_artifact_gpt3_6_7b_ratios.csv").set_index("trace")
    assert ratios.loc["6h", "Oobleck/Varuna artifact"] == pytest.approx(4.329178 / 4.144960)


@pytest.mark.parametrize("quirks", [False, True])
def test_bamboo_pipelines_with_a_spare_by_hand(tmp_path, quirks):
    # 5 nodes in 2-stage pipelines: slots 0-1 and 2-3 are pipelines, slot 4 the idle spare. A step
    # is 100 samples at 50 / 30 samples/s on 5 / 3 nodes: 2 s / 3.333 s. Ready at 1 s + a 1 s start.
    # The spare (e) is removed at 11 s, node b (pipeline 0, stage 1) at 21 s: a, holding stage 0,
    # absorbs b's stage; the hard stop is at 40 s.
    rows = [(0, "add", n) for n in "abcde"] + [(11000, "remove", "e"), (21000, "remove", "b"), (40000, "remove", "a")]
    trace = trace_file(tmp_path, rows)
    s, run_dir = run(
        tmp_path,
        trace,
        "cluster.n_workers=5",
        "+hardware.tables.default={5: 50, 4: 40, 3: 30}",
        "method=bamboo",
        "+method.variant_options.pipeline_stages=2",
        "method.fallback_slowdown=1.5",
        "method.rebalance_stall_s=2",
        "method.restart_s=1",
        "method.charge_initial_checkpoint=false",
        *(
            ["method.variant=mecefo_exp.replay.pipelines:BambooArtifact", "+method.variant_options.heap_order=false"]
            if quirks
            else ["method.variant=mecefo_exp.replay.bamboo_pipelines:BambooPipelines"]
        ),
    )
    w = s["window"]
    if not quirks:
        # the spare's loss changes nothing: steps end 4, 6, ..., 20 (9); b falls 1 s into the next,
        # whose last second runs 1.5x slower (22.5); a holds two stages: re-form (2 s, to 24.5) into
        # one pipeline on 3 nodes (a, c; d the spare): 27.83, 31.17, 34.5, 37.83 (41.17 > 40). 14 steps.
        assert s["steps"] == 14 and w["last_step_end_s"] == pytest.approx(37.0 + 5 / 6)
    else:
        # the artifact: losing the spare starts the fallback; the step in flight (10-12) ends at 12.5,
        # then 3 s steps: 15.5, 18.5, 21.5 (b's loss adds nothing: the fallback is on); re-form to 23.5;
        # 26.83, 30.17, 33.5, 36.83. 12 steps.
        assert s["steps"] == 12 and w["last_step_end_s"] == pytest.approx(36.0 + 5 / 6)
    assert w["train_start_s"] == pytest.approx(2.0)
    assert w["samples_per_s"] == pytest.approx(100 * s["steps"] / (w["last_step_end_s"] - 2.0))
    assert s["rebalances"] == 1 and s["spares_lost"] == 1 and s["neighbor_assignments"] == 1 and s["fatal"] == 0
    events = [json.loads(line) for line in open(run_dir / "events.jsonl")]
    assert [e["detail"]["spares"] for e in events if e["kind"] == "rebalance"] == [[3]]


def test_bamboo_pipelines_two_adjacent_removals_are_fatal(tmp_path):
    # a (stage 0) absorbs b (stage 1) at 5 s; a falls at 6 s, before the re-formation: fatal
    rows = [(0, "add", n) for n in "abcde"] + [(5000, "remove", "b"), (6000, "remove", "a"), (40000, "remove", "c")]
    s, _ = run(
        tmp_path,
        trace_file(tmp_path, rows),
        "cluster.n_workers=5",
        "+hardware.tables.default={5: 50, 3: 30}",
        "method=bamboo",
        PIPELINES,
        "+method.variant_options.pipeline_stages=2",
        "method.fallback_slowdown=1.5",
        "method.rebalance_stall_s=20",
        "method.restart_s=1",
        "method.charge_initial_checkpoint=false",
    )
    assert s["fatal"] == 1


#: the orders the artifact's heap hands out the 30 nodes added at t = 0 in each of the five standard traces
STANDARD_START = [
    29,
    0,
    24,
    7,
    15,
    14,
    2,
    6,
    28,
    27,
    25,
    13,
    26,
    5,
    12,
    11,
    22,
    21,
    16,
    23,
    10,
    1,
    4,
    20,
    19,
    17,
    9,
    18,
    3,
    8,
]
STANDARD_NODES = [
    29,
    14,
    6,
    2,
    0,
    28,
    13,
    27,
    26,
    12,
    5,
    25,
    24,
    11,
    23,
    22,
    10,
    4,
    1,
    21,
    20,
    9,
    19,
    18,
    8,
    3,
    17,
    16,
    7,
    15,
]


def test_the_bamboo_orders_derived_from_a_standard_trace_are_the_artifacts_heap_order():
    """The order the artifact's event heap hands out the 30 nodes added at t = 0, derived from each
    trace, is the same on all five (node30 first: not first-in first-out), and the one our Bamboo
    takes its first pipelines in."""
    from mecefo_exp.replay.heap_order import node_tie_order

    cfg = compose_cfg(["scenario=oobleck_artifact/bert_large", "method=bamboo"])
    assert cfg.method.variant_options.start_order is None and cfg.method.variant_options.node_order is None
    for trace in ("6h", "3h", "1h", "30m", "10m"):
        path = cfg.failure.path.replace("10m.csv", f"{trace}.csv")
        registered, joined = node_tie_order(path, ready_s=45.0, first_delay_s=30.0, min_nodes=12)
        assert (joined, registered) == (STANDARD_START, STANDARD_NODES)


def test_the_heap_with_its_ties_broken_by_slot_hands_out_the_nodes_in_slot_order():
    """heap_order=false is the artifact's heap with the ties of one instant broken by slot (the check
    docs/ARTIFACT.md describes): the 30 nodes of a standard trace come out in slot order."""
    from mecefo_exp.replay.heap_order import first_formation

    cfg = compose_cfg(["scenario=oobleck_artifact/bert_large", "method=bamboo"])
    registered, joined, formed_at = first_formation(cfg.failure.path, 45.0, 30.0, min_nodes=12, ties_by_slot=True)
    assert registered == joined == list(range(30)) and formed_at == 75.0
    assert first_formation(cfg.failure.path, 45.0, 30.0, min_nodes=12)[:2] == (STANDARD_NODES, STANDARD_START)


def test_bamboo_takes_its_orders_from_any_trace(tmp_path):
    """Without scenario.quirks too, BambooPipelines' first pipelines take a trace's nodes in the heap's
    order: on a standard trace the listed one, on another its own (a list typed by hand still wins)."""
    from mecefo_exp.replay.bamboo_pipelines import BambooPipelines
    from mecefo_exp.run.experiment import Experiment

    seen = {}
    real_start = BambooPipelines.start

    def spy(self):
        real_start(self)
        seen["start"], seen["nodes"] = list(self.start_order), list(self.node_order)

    rows = [(0, "add", f"node{k}") for k in range(1, 14)] + [(900000, "add", "node14"), (3600000, "remove", "node1")]
    other = trace_file(tmp_path, rows)
    mp = pytest.MonkeyPatch()
    mp.setattr(BambooPipelines, "start", spy)
    try:
        for path, overrides, want in (
            (None, [], STANDARD_START),
            (other, [], None),
            (
                other,
                ["method.variant_options.start_order=[12,11,10,9,8,7,6,5,4,3,2,1,0,13]"],
                [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 13],
            ),
        ):
            cfg = compose_cfg(
                [
                    "scenario=oobleck_artifact/bert_large",
                    "method=bamboo",
                    "scenario.trace=6h",
                    "hardware.timing_model=null",
                    "trainer.progress=none",
                    "trainer.max_steps=3",
                    *([f"failure.path={path}"] if path else []),
                    *overrides,
                ]
            )
            Experiment(cfg, tmp_path / f"run{len(seen)}{len(overrides)}").run()
            if want is None:  # ours: derived from this trace, 14 slots
                from mecefo_exp.replay.heap_order import node_tie_order

                registered, joined = node_tie_order(str(other), 45.0, 30.0, min_nodes=12)
                want = joined + [w for w in registered if w not in joined] + [13]
                assert cfg.cluster.n_workers == 14 and sorted(seen["start"]) == list(range(14))
            assert seen["start"] == want
    finally:
        mp.undo()


def test_a_user_trace_sets_the_worker_slots(tmp_path):
    """failure.path alone: the worker slots are the most the trace holds at once (34 here, more than the
    scenario's 30), and the run gives the replay's value without a second run."""
    from mecefo_exp.api import validate_run
    from mecefo_exp.run.experiment import Experiment

    rows = [(0, "add", f"node{k}") for k in range(1, 33)] + [
        (1200000, "add", "node33"),
        (1200000, "add", "node34"),
        (2400000, "remove", "node5"),
        (7200000, "remove", "node6"),
    ]
    path = trace_file(tmp_path, rows)
    base = [
        "scenario=oobleck_artifact/gpt3_2_7b",
        "method=checkpoint",
        "scenario.quirks=true",
        "hardware.timing_model=null",
        "trainer.progress=none",
        f"failure.path={path}",
    ]
    cfg = compose_cfg(base)
    assert cfg.cluster.n_workers == 34
    validate_run(cfg)
    summary = Experiment(cfg, tmp_path / "run").run()
    assert summary["window"]["samples_per_s"] > 0
    assert compose_cfg(base + ["cluster.n_workers=40"]).cluster.n_workers == 40  # typed: wins
    assert compose_cfg(base[:-1]).cluster.n_workers == 30  # the standard traces: 30 nodes at t=0
    missing = compose_cfg(base[:-1] + [f"failure.path={tmp_path / 'nowhere.csv'}"])
    with pytest.raises(ConfigError, match="no such file"):
        validate_run(missing)


@pytest.mark.parametrize("model", ["gpt3_2_7b", "gpt3_6_7b"])
@pytest.mark.parametrize("quirks", [False, True])
def test_every_model_takes_the_same_bamboo_overrides_and_gpt3_says_out_of_memory(tmp_path, model, quirks):
    """The overrides a BERT-large Bamboo run takes (its orders, a trace of its own) are accepted for GPT-3
    too, whose Bamboo is refused for the one reason the artifact gives: out of memory."""
    from mecefo_exp.api import validate_run

    path = trace_file(tmp_path, [(0, "add", f"node{k}") for k in range(1, 33)] + [(3600000, "remove", "node1")])
    for extra in ([], ["method.variant_options.start_order=null", "method.variant_options.node_order=null"]):
        cfg = compose_cfg(
            [
                f"scenario=oobleck_artifact/{model}",
                "method=bamboo",
                f"scenario.quirks={quirks}",
                f"failure.path={path}",
                *extra,
            ]
        )
        with pytest.raises(
            ConfigError, match=r"^method=bamboo cannot run here: hardware.tables.bamboo is 0 \(out of memory\)"
        ):
            validate_run(cfg)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["+method.variant_options.pipeline_stages=2"], "needs hardware=table"),
        (
            [
                "hardware=table",
                "hardware.samples_per_step=8",
                "+hardware.tables.default={4: 40}",
                "+method.variant_options.pipeline_stages=5",
            ],
            r"must be in \[1, cluster.n_workers=4\]",
        ),
        (
            [
                "hardware=table",
                "hardware.samples_per_step=8",
                "+hardware.tables.default={4: 40}",
                "+method.variant_options.pipeline_stages=2",
                "+method.variant_options.start_order=[0,1,1,3]",
            ],
            r"method.variant_options.start_order: must list each worker slot 0..3 once",
        ),
    ],
)
def test_bamboo_pipelines_bad_settings_are_one_line(overrides, message):
    from mecefo_exp.api import validate_run

    cfg = compose_cfg(["method=bamboo", "cluster.n_workers=4", PIPELINES, *overrides])
    with pytest.raises(ConfigError, match=message):
        validate_run(cfg)


def test_bamboo_pipelines_take_an_added_node_when_it_completes_a_pipeline(tmp_path):
    # 2-stage pipelines on a, b, c, d; d falls at 10 s (c covers it), the re-formation after that
    # step leaves one pipeline (a, b) and c idle; e, added at 20 s, is usable at 21 s and with c
    # completes a second pipeline: the step ending at 21.67 s is followed by a re-formation to 4 nodes
    rows = [(0, "add", n) for n in "abcd"] + [(10000, "remove", "d"), (20000, "add", "e"), (40000, "remove", "a")]
    s, run_dir = run(
        tmp_path,
        trace_file(tmp_path, rows),
        "method=bamboo",
        PIPELINES,
        "+method.variant_options.pipeline_stages=2",
        "method.fallback_slowdown=1.5",
        "method.rebalance_stall_s=2",
        "method.restart_s=1",
        "method.charge_initial_checkpoint=false",
    )
    costs = {round(r["sim_time_s"], 3): r["step_cost_s"] for r in map(json.loads, open(run_dir / "metrics.jsonl"))}
    # 4.5, 7, 9.5; the step in flight ends at 13 (its last 2 s at 1.5x); re-form to 15; 18.33, 21.67 on
    # 3 nodes; re-form to 23.67; 2.5 s steps on 4 nodes: 26.17 ... 38.67
    assert costs[21.667] == pytest.approx(100 / 30) and costs[26.167] == pytest.approx(2.5)
    assert max(costs) == pytest.approx(38.667) and s["rebalances"] == 2 and s["steps"] == 12


def test_varuna_quirks_a_removal_during_the_first_rendezvous_stops_the_job_by_hand(tmp_path):
    # 4 nodes usable at 1 s, a 3 s restart: the job starts at 4 s. node2 goes at 2 s, inside that
    # first rendezvous: it completes at 4 s without node2 (3 nodes, 3.333 s steps), and node2's own
    # timeout (2 + 3 = 5 s) finds nothing left to form: the job stops, the step in flight is lost.
    # node4 goes at 10 s: restart to 13 s on 2 nodes (5 s steps); checkpoints of 0.5 s after the
    # first step (a removal came) and every 2 completed steps: steps end 18 (+0.5), 23.5 (+0.5),
    # 29, 34 (+0.5), 39.5; the next would end at 44.5, after the hard stop at 40 s.
    rows = [(0, "add", f"node{i}") for i in range(1, 5)] + [
        (2000, "remove", "node2"),
        (10000, "remove", "node4"),
        (40000, "remove", "node1"),
    ]
    s, run_dir = run(
        tmp_path,
        trace_file(tmp_path, rows),
        *VARUNA_BY_HAND,
    )
    w = s["window"]
    assert s["steps"] == 5 and w["credited_samples"] == 500
    assert w["train_start_s"] == pytest.approx(4.0) and w["last_step_end_s"] == pytest.approx(39.5)
    events = [json.loads(line) for line in open(run_dir / "events.jsonl")]
    assert [e["sim_time_s"] for e in events if e["kind"] == "stopped"] == [pytest.approx(5.0)]
    assert [e["sim_time_s"] for e in events if e["kind"] == "restart"] == [pytest.approx(13.0)]


def test_varuna_quirks_a_node_ready_while_training_waits_even_if_the_job_stops_before_we_hear_of_it(tmp_path):
    # As above, the job starts at 4 s on 4 nodes. node2 goes at 10 s, node3 at 11 s: node2's
    # timeout restarts at 13 s on 2 nodes (5 s steps), node3's at 14 s finds no rendezvous and
    # stops the job. node5, added at 12.5 s, is usable at 13.5 s, inside the step in flight: it
    # found the job training and waits (the artifact opens no rendezvous for it); it joins the
    # rendezvous node1's removal at 20 s opens, which completes at 23 s.
    rows = [(0, "add", f"node{i}") for i in range(1, 5)] + [
        (10000, "remove", "node2"),
        (11000, "remove", "node3"),
        (12500, "add", "node5"),
        (20000, "remove", "node1"),
        (40000, "remove", "node4"),
    ]
    _, run_dir = run(
        tmp_path,
        trace_file(tmp_path, rows),
        *VARUNA_BY_HAND,
        "cluster.n_workers=5",
    )
    events = [json.loads(line) for line in open(run_dir / "events.jsonl")]
    assert [e["sim_time_s"] for e in events if e["kind"] == "stopped"] == [pytest.approx(14.0)]
    assert [e["sim_time_s"] for e in events if e["kind"] == "restart"] == [pytest.approx(13.0), pytest.approx(23.0)]


def test_the_artifacts_checkpoint_test_walks_its_list_in_storage_order():
    """A removal an hour away fails a checkpoint that completes at 12 s when it sits earlier in the
    heap's list than the checkpoint's event; in time order it would not."""
    from mecefo_exp.replay.queue import CHECKPOINT, REMOVE, STEP, ArtifactQueue

    queue = ArtifactQueue([], ready_s=1.0, restart_s=lambda at: 1.0)
    for event in [(5, STEP), (6, STEP), (3_600_000, REMOVE), (7, STEP)]:
        queue.push(*event)
    assert queue.keys() == [(5, STEP), (6, STEP), (3_600_000, REMOVE), (7, STEP)]
    assert queue.checkpoint_fails(step_end_s=6.0, write_s=3.0)  # its event (12 s) goes in after the removal
    assert queue.keys()[-1] == (12_000, CHECKPOINT)


@pytest.mark.slow  # the artifact's 15 Varuna cells of a model (~5 s each): `make test-fingerprints`
@pytest.mark.parametrize("model", ["bert_large", "gpt3_2_7b", "gpt3_6_7b"])
def test_every_varuna_cell_agrees_with_the_artifact_when_its_behaviour_is_on(tmp_path, model):
    """All five traces; with the artifact's storage-order test replaced by the time-ordered one the
    cells it moves differ, and Oobleck/Varuna at 6.7B, 10 minutes, is the abstract's 13.9x."""
    import csv

    from mecefo_exp.run.experiment import Experiment

    path = "conf/scenario/oobleck_artifact/reference.csv"
    with open(path) as f:
        ref = {
            (r["model"], r["trace"], r["method"]): float(r["samples_per_s"])
            for r in csv.DictReader(line for line in f if not line.startswith("#"))
        }

    def cell(trace, method, *extra):
        cfg = compose_cfg(
            [
                f"scenario=oobleck_artifact/{model}",
                f"method={method}",
                f"scenario.trace={trace}",
                "scenario.quirks=true",
                "hardware.timing_model=null",
                "trainer.progress=none",
                "trainer.log_events=0",
                *extra,
            ]
        )
        return Experiment(cfg, tmp_path / f"{trace}_{method}_{len(extra)}").run()["window"]["samples_per_s"]

    for trace in ("6h", "3h", "1h", "30m", "10m"):
        assert cell(trace, "checkpoint") == pytest.approx(ref[(model, trace, "checkpoint")], rel=1e-4), trace
    in_time_order = cell("10m", "checkpoint", "method.variant_options.storage_order=false")
    assert in_time_order > ref[(model, "10m", "checkpoint")] * 1.02  # every model's 10-minute cell moves
    if model == "gpt3_6_7b":
        ratio = cell("10m", "oobleck") / cell("10m", "checkpoint")
        assert ratio == pytest.approx(13.9, rel=2e-3)


def test_reft_on_the_survivors_by_hand(tmp_path, two_removals):
    # start: ready at 1 s + a 3 s restart = 4 s; snapshots every 2 steps, none of their copy
    # charged (overlap 1). 4 nodes: steps end 6.5, 9 (snapshot of step 2 on 4 workers); the step
    # in flight at 10 s is lost; restart from memory, 3 s (and the tiny state copy), to 13 s, on
    # the 3 survivors, the snapshot re-sharded over them: steps end 16.33, 19.67 (snapshot of
    # step 4 on 3 workers); node4's shard goes at 20 s: rebuilt from parity, restart to 23 s on
    # 2 workers: steps end 28, 33, 38; the next would end at 43, after the hard stop at 40 s.
    s, run_dir = run(
        tmp_path,
        two_removals,
        "method=reft",
        "method.restart_on=survivors",
        "method.snapshot_every=2",
        "method.overlap=1.0",
        "cluster.restart_s=3",
        "method.charge_initial_checkpoint=false",
    )
    w = s["window"]
    assert s["steps"] == 7 and w["credited_samples"] == 700 and s["lost_steps"] == 0
    assert w["train_start_s"] == pytest.approx(4.0) and w["last_step_end_s"] == pytest.approx(38.0, abs=0.01)
    events = [json.loads(line) for line in open(run_dir / "events.jsonl")]
    restarts = [e for e in events if e["kind"] == "restart"]
    assert [(e["detail"]["source"], e["detail"]["from_step"]) for e in restarts] == [("memory", 2), ("memory", 4)]
    assert not [e for e in events if e["kind"] == "fatal"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["method=checkpoint", "++method.restart_s_by_nodes={4: 3}"], "needs method.restart_on=survivors"),
        (["method=checkpoint", "method.restart_on=survivors", "++method.restart_s_by_nodes={4: -1}"], "seconds >= 0"),
        (
            [
                "method=checkpoint",
                "method.restart_on=survivors",
                "method.variant=mecefo_exp.replay.varuna:VarunaArtifact",
            ],
            "trainer.numerics=false",
        ),
        (
            ["method=checkpoint", "method.variant=mecefo_exp.replay.varuna:VarunaArtifact", "trainer.numerics=false"],
            "restart_on=survivors",
        ),
        (["method=oobleck", "method.variant=mecefo_exp.replay.varuna:VarunaArtifact"], "not a subclass of Oobleck"),
        (["method=oobleck", "method.variant=mecefo_exp.replay.nowhere:X"], "cannot be imported"),
        (
            [
                "method=checkpoint",
                "method.variant=mecefo_exp.replay.varuna:VarunaArtifact",
                "trainer.numerics=false",
                "method.restart_on=survivors",
                "+method.variant_options.storage=1",
            ],
            "unknown \\['storage'\\]",
        ),
        (["method=reft", "method.restart_on=elsewhere"], "allowed: spares, survivors"),
        (
            [
                "method=bamboo",
                "hardware=table",
                "hardware.samples_per_step=8",
                "+hardware.tables.default={4: 40}",
                "method.variant=mecefo_exp.replay.pipelines:BambooArtifact",
            ],
            "needs method.variant_options.pipeline_stages",
        ),
    ],
)
def test_replay_and_restart_settings_are_one_line(overrides, message):
    from mecefo_exp.api import validate_run

    cfg = compose_cfg(["cluster.n_workers=4", *overrides])
    with pytest.raises(ConfigError, match=message) as e:
        validate_run(cfg)
    assert "\n" not in str(e.value)


ARTIFACT_30 = [(0, "add", f"node{i}") for i in range(1, 31)]


def artifact_cell(tmp_path, rows, model, method, *extra):
    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(
        [
            f"scenario=oobleck_artifact/{model}",
            f"method={method}",
            "scenario.quirks=true",
            f"failure.path={trace_file(tmp_path, rows)}",
            "trainer.progress=none",
            *extra,
        ]
    )
    summary = Experiment(cfg, tmp_path / "run").run()
    events = [json.loads(line) for line in open(tmp_path / "run" / "events.jsonl")]
    return summary, events


@pytest.mark.parametrize("method", ["oobleck", "checkpoint", "reft"])
def test_a_node_removed_while_it_waits_to_join_never_joins(tmp_path, method):
    """node31 takes node1's slot at 2000 s and waits for the next re-formation; it is removed at
    3000 s before one happens. The artifact's Oobleck gives 348.343 samples/s on this trace (its
    simulator, unmodified); admitting the removed node gave 362.126."""
    rows = ARTIFACT_30 + [
        (1_000_000, "remove", "node1"),
        (2_000_000, "add", "node31"),
        (3_000_000, "remove", "node31"),
        (5_000_000, "remove", "node2"),
        (8_000_000, "remove", "node3"),
    ]
    summary, events = artifact_cell(tmp_path, rows, "bert_large", method)
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    alive = {r["alive"] for r in rows if 3_100 < r["sim_time_s"] < 5_000}
    assert alive == {29}, alive  # node31 never trained; node1's slot stays empty
    if method == "oobleck":
        assert summary["window"]["samples_per_s"] == pytest.approx(348.343, abs=5e-4)


def test_each_instant_is_delivered_with_its_own_time(tmp_path):
    """node1 is removed at 50 s, during the job's first rendezvous; node31 is added at 55 s and is
    ready at 100 s, inside the same start-up stall. The removal's restart timeout is 50 + 60.2 s:
    the artifact's Varuna stops at 110.2 s (dated by the later event, it stopped at 160.2 s)."""
    rows = ARTIFACT_30 + [
        (50_000, "remove", "node1"),
        (55_000, "add", "node31"),
        (3_000_000, "remove", "node2"),
        (6_000_000, "remove", "node3"),
    ]
    # node31 is usable before the job starts: it joins the first rendezvous in a slot of its own
    _, events = artifact_cell(tmp_path, rows, "bert_large", "checkpoint", "cluster.n_workers=31")
    stopped = [e["sim_time_s"] for e in events if e["kind"] == "stopped"]
    assert stopped and stopped[0] == pytest.approx(110.2)


def _nodes_at(rows, ready_s):
    """Usable nodes at time t (seconds), from a trace's rows: what a run may have alive."""
    added, removed = {}, {}
    for t, verb, name in rows[:-1]:  # the last row is the hard stop
        (added if verb == "add" else removed)[name] = t / 1000
    return lambda t: sum(1 for name, at in added.items() if at + ready_s <= t and removed.get(name, float("inf")) > t)


@pytest.mark.parametrize(
    "method",
    [
        ["method=mecefo", "method.charge_initial_checkpoint=false"],
        [
            "method=bamboo",
            "method.rebalance_after_steps=1000",
            "method.restart_s=1",
            "method.charge_initial_checkpoint=false",
        ],
    ],
)
def test_a_fatal_fall_back_under_a_node_trace_restarts_on_the_nodes_there(tmp_path, method):
    """b, c and d are removed for good at 10, 20 and 30 s; e is added at 40 s (usable at 41 s) in the
    first free slot; the hard stop is at 80 s. MeCeFO runs out of neighbours at 30 s, Bamboo at 20 s
    (adjacent failures): the fall-back restarts from the checkpoint. No spare exists outside the
    trace's nodes, so the restarted job runs on the nodes there (1 node: 10 s steps, all four
    micro-batches on it), e joins it (2 nodes: 5 s steps). It used to revive the removed nodes:
    4 alive while 1 node existed, more samples than the nodes could give."""
    rows = [(0, "add", n) for n in "abcd"] + [
        (10000, "remove", "b"),
        (20000, "remove", "c"),
        (30000, "remove", "d"),
        (40000, "add", "e"),
        (80000, "remove", "a"),
    ]
    table = "+hardware.tables.default={4: 40, 3: 30, 2: 20, 1: 10}"
    s, run_dir = run(tmp_path, trace_file(tmp_path, rows), table, "cluster.restart_s=1", *method)
    assert s["fatal"] >= 1
    nodes_at = _nodes_at(rows, ready_s=1.0)
    metrics = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    for r in metrics:  # a row's alive is the nodes there when its step began
        assert r["alive"] <= nodes_at(r["sim_time_s"] - r["step_cost_s"] + 1e-9), r
    assert [r["alive"] for r in metrics if 31 < r["sim_time_s"] - r["step_cost_s"] < 40] and all(
        r["alive"] == 1 and r["step_cost_s"] == pytest.approx(10.0)
        for r in metrics
        if 31 < r["sim_time_s"] - r["step_cost_s"] < 40
    )
    late = [r for r in metrics if r["sim_time_s"] - r["step_cost_s"] > 42]
    assert late and all(r["alive"] == 2 and r["step_cost_s"] == pytest.approx(5.0) for r in late)
    assert s["window"]["goodput_over_ideal"] <= 1.0 + 1e-9


def _bamboo_artifact_events(tmp_path, rows):
    """BERT-large Bamboo with the artifact's behaviours, its first pipelines in slot order (node k+1
    holds slot k: pipeline 0 is nodes 1-12, pipeline 1 nodes 13-24), on a trace of our own."""
    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg(
        [
            "scenario=oobleck_artifact/bert_large",
            "method=bamboo",
            "scenario.quirks=true",
            "method.variant_options.heap_order=false",
            "trainer.progress=none",
            f"failure.path={trace_file(tmp_path, rows)}",
        ]
    )
    summary = Experiment(cfg, tmp_path / "run").run()
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    return summary, events


def test_a_node_removed_before_it_is_usable_is_no_member_of_bamboos_rendezvous(tmp_path):
    """A rendezvous collects the nodes usable when it starts, and those that become usable while it
    collects (B:1116-1119, B:1171-1172); a node added during it and removed before its 45 s are up was
    never one of them, so its removal does not start the rendezvous over (B:1123-1134): it completes
    when its 30 s timeout fires, as it would without that node."""
    start = [(0, "add", f"node{k}") for k in range(1, 26)]
    # node1 (stage 0) is absorbed by node12; node2 (stage 1) then finds its shadow holding two: fatal
    rows = start + [
        (1000000, "remove", "node1"),
        (1000000, "remove", "node2"),
        (1010000, "add", "node26"),
        (1020000, "remove", "node26"),  # usable at 1055 s: it never was
        (3000000, "remove", "node3"),
    ]
    summary, events = _bamboo_artifact_events(tmp_path, rows)
    assert summary["fatal"] == 1
    after = [e for e in events if 1000.0 <= e["sim_time_s"] < 3000.0]
    assert not [e for e in after if e["kind"] == "rendezvous_restarted"]
    formed = [e["sim_time_s"] for e in after if e["kind"] == "rebalance"]
    assert formed[0] == pytest.approx(1030.0)  # the fatal removal's global timeout, 30 s later


def test_a_stage_whose_predecessor_left_in_a_fatal_removal_is_dropped_not_fatal_again(tmp_path):
    """While the rendezvous of a fatal removal collects, the artifact looks for the node holding a
    removed node's predecessor stage; the fatal node took that stage with it, nobody is found, and
    nothing more happens (B:1074-1094): one fatal failure, one rendezvous, which the removed member
    starts over once (B:1123-1134) and which then forms the pipelines."""
    start = [(0, "add", f"node{k}") for k in range(1, 26)]
    rows = start + [
        (1000000, "remove", "node1"),
        (1000000, "remove", "node2"),  # fatal (above)
        (1005000, "remove", "node3"),  # stage 2, whose predecessor stage went with node2
        (3000000, "remove", "node4"),
    ]
    summary, events = _bamboo_artifact_events(tmp_path, rows)
    assert summary["fatal"] == 1
    after = [e for e in events if 1000.0 <= e["sim_time_s"] < 3000.0]
    assert [e["worker"] for e in after if e["kind"] == "stage_dropped"] == [2]
    assert not [e for e in after if e["kind"] == "stopped"]
    formed = [e["sim_time_s"] for e in after if e["kind"] == "rebalance"]
    assert formed[0] == pytest.approx(1060.0)  # node3 was a member: its timeout at 1030 s starts it over


def test_after_a_timeout_that_found_no_rendezvous_stage_0_has_no_predecessor(tmp_path):
    """A timeout that finds no rendezvous completes one of no nodes: the artifact's stage count becomes
    0 (B:1195-1214) while the nodes keep their stages, so the stage before stage 0 is (pipeline, -1)
    (B:1081-1083), which nobody holds: removing stage 0's node then is dropped, never fatal, and the job
    stays stopped until a node becomes usable."""
    start = [(0, "add", f"node{k}") for k in range(1, 26)]
    rows = start + [
        (1000000, "remove", "node1"),  # node12 holds two stages: a local rendezvous after the step (76 s)
        (1110000, "remove", "node12"),  # fatal inside it: a global rendezvous, formed at 1140 s
        (1200000, "remove", "node2"),  # after the local timeout found no rendezvous: stage (0, 0)
        (1200000, "remove", "node14"),  # and stage (0, 11)
        (1300000, "add", "node26"),  # usable at 1345 s: a global rendezvous, formed at 1375 s
        (3000000, "remove", "node3"),
    ]
    summary, events = _bamboo_artifact_events(tmp_path, rows)
    seen = [(e["sim_time_s"], e["kind"], e["worker"]) for e in events if 1100.0 <= e["sim_time_s"] < 1400.0]
    assert (1140.0, "rebalance", None) in seen
    assert [k for t, k, _ in seen if 1141.0 < t < 1200.0] == ["stopped"]  # the local timeout, then nothing
    assert (1200.0, "stage_dropped", 1) in seen
    assert summary["fatal"] == 1
    assert [t for t, k, _ in seen if k == "rebalance" and t > 1141.0] == [pytest.approx(1375.0)]
