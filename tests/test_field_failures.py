"""Field failure data (failure=llama3_taxonomy): Llama 3's counts by cause, job MTTF against GPU count,
and a whole-job fault met by every method's fall-back."""

import json
import math
import re
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import compose_cfg
from mecefo_exp.failures import field as ff
from mecefo_exp.methods import REGISTRY

DAYS54 = 54 * 86400.0
HYBRID = [
    "model=llama_60m",
    "hardware=h100_8",
    "cluster.n_workers=16",
    "parallel.tp=2",
    "parallel.pp=2",
    "parallel.microbatches=4",
    "trainer.numerics=false",
    "data.micro_batch=1",
    "data.seq_len=256",
    "trainer.eval_every=0",
    "trainer.max_steps=40",
    "hardware.storage_GBps=1e6",
]


def preset(**over):
    cfg = compose_cfg(["failure=llama3_taxonomy"]).failure
    return OmegaConf.merge(cfg, over)


def test_the_preset_is_the_papers_table():
    assert sum(n for _, _, n in ff.LLAMA3_CAUSES) == ff.LLAMA3_TOTAL == 419
    job = sum(n for _, cat, n in ff.LLAMA3_CAUSES if ff.RADIUS_OF_CATEGORY[cat] == "job")
    assert job == 63 and ff.job_share() == pytest.approx(63 / 419)


def test_llama3_taxonomy_gives_419_interruptions_in_54_days_at_16384_gpus():
    """Ten seeds of 54 days on 16,384 GPUs: each count inside the Poisson 99.9% band of 419, the mean
    of the ten inside the band of a mean of ten, and the whole-job causes near their 63."""
    cfg = preset()
    counts, jobs = [], []
    for seed in range(10):
        drawn = list(ff.arrivals(cfg, 16384, DAYS54, 3600.0, seed))
        counts.append(len(drawn))
        jobs.append(sum(c.radius == "job" for _, c, _ in drawn))
    for n in counts:
        assert abs(n - 419) < 3.29 * math.sqrt(419), counts
    mean = sum(counts) / len(counts)
    assert abs(mean - 419) < 1.96 * math.sqrt(419 / len(counts)), (mean, counts)
    assert abs(sum(jobs) / 10 - 63) < 3.29 * math.sqrt(63 / 10), jobs


@pytest.mark.parametrize("gpus", [1024, 4096, 16384])
def test_job_mttf_scales_inversely_with_gpu_count(gpus):
    """Job MTTF (mean time between interruptions) at 1k/4k/16k GPUs: Llama 3's 54 x 24 / 419 h at
    16,384 GPUs times 16,384 / N, within the Poisson band of the interruptions counted (2,000 of them
    per case). (The research clusters' fitted MTTF curve is not used: docs/METHODS.md says why.)"""
    expected_h = 54 * 24 / 419 * 16384 / gpus
    n = 2000
    times = [t for t, _, _ in ff.arrivals(preset(), gpus, n * expected_h * 3600.0, 3600.0, seed=1)]
    mttf_h = times[-1] / len(times) / 3600.0
    assert abs(len(times) - n) < 3.29 * math.sqrt(n)
    assert mttf_h == pytest.approx(expected_h, rel=3.29 / math.sqrt(n))


def test_the_trace_has_each_causes_blast_radius():
    """Through make_trace: a GPU fault takes a tensor-parallel group (unit_gpus), a host fault a
    server, a switch fault two servers, a job fault every worker at one instant, back at once."""
    from mecefo_exp.failures import make_trace

    cfg = preset(unit_gpus=2, every_h=ff.LLAMA3_DAYS * 24 / ff.LLAMA3_TOTAL / 2000)  # 2000x Llama 3's rate
    trace = make_trace(cfg, 64, 1.0, 86400, seed=0, real_time=True)
    sizes = {}
    for e in trace.events:
        if e.kind == "fail":
            sizes.setdefault(e.time, []).append(e.worker)
    back_at_once = {e.time for e in trace.events if e.kind == "recover" and e.time in sizes}
    widths = {len(ws) for t, ws in sizes.items() if t not in back_at_once}
    assert widths == {2, 8, 16}, widths
    assert back_at_once  # job faults: every worker up then fails and is back at the same instant
    for t, ws in sizes.items():
        if t not in back_at_once:
            assert min(ws) % len(ws) == 0 and sorted(ws) == list(range(min(ws), min(ws) + len(ws)))
    within_run = sum(1 for t in sizes if t < 86400)
    assert abs(within_run - trace.expected["unit_failures"]) < 3.29 * math.sqrt(trace.expected["unit_failures"])


@pytest.mark.parametrize("method", sorted(REGISTRY))
def test_a_whole_job_fault_is_one_fall_back_for_every_method(run_exp, tmp_path, method):
    """All 16 GPUs fail at one instant and are back at once (a software fault): every method restarts
    once from its checkpoint (the in-place methods through their fatal fall-back), never more. Written
    as one `job` fail and recover, the trace gives the same run as with one row per worker, and the
    record has one row for it: the workers up then (a tensor-parallel group down since 5.5 is not)."""
    from conftest import VOLATILE_SUMMARY, read_jsonl
    from mecefo_exp.methods.rollback import RollbackMethod
    from mecefo_exp.methods.setting_roles import has_checkpoint_interval
    from mecefo_exp.registry import method_class

    down = ["5.5,0,fail", "5.5,1,fail"]
    back = ["20.5,0,recover", "20.5,1,recover"]
    per_worker = down + [f"10.5,{w},fail" for w in range(2, 16)] + [f"10.5,{w},recover" for w in range(2, 16)] + back
    interval = ["method.checkpoint_interval=4"] if has_checkpoint_interval(method_class(method)) else []  # JIT has none
    runs = []
    for name, rows in [("workers", per_worker), ("job", down + ["10.5,job,fail", "10.5,job,recover"] + back)]:
        path = tmp_path / f"{name}.csv"
        path.write_text("time,worker,event\n" + "\n".join(rows) + "\n")
        runs.append(
            run_exp(
                *HYBRID,
                f"method={method}",
                "failure=trace",
                "failure.unit=steps",
                f"failure.path={path}",
                *interval,
                micro=False,
            )
        )
    (summary, _), (job, job_dir) = runs
    assert summary["status"] == "ok" and summary["steps"] == 40
    restarts = issubclass(method_class(method), RollbackMethod)  # the group's failure is a restart too
    assert summary["rollbacks"] == 1 + restarts, summary["rollbacks"]
    if "fatal" in summary:
        assert summary["fatal"] == 1
    same = {k: v for k, v in summary.items() if k not in VOLATILE_SUMMARY | {"config_sha256", "failure", "git_sha"}}
    assert json.dumps({k: job.get(k) for k in same}, sort_keys=True) == json.dumps(same, sort_keys=True)  # NaN too
    rows = [r for r in read_jsonl(job_dir / "events.jsonl") if r["kind"] in ("fail", "recover")]
    assert [(r["kind"], r["worker"], r["detail"].get("workers")) for r in rows] == [
        ("fail", 0, None),
        ("fail", 1, None),
        ("fail", None, 14),
        ("recover", None, 14),
        ("recover", 0, None),
        ("recover", 1, None),
    ]
    assert job["failures"] == 16


def test_a_job_wide_fault_is_two_events_whatever_the_cluster():
    """At 65,536 GPUs a job-wide fault is one fail and one recover in the trace (not 131,072), trace.csv
    names it `job` and reads back as it was written, and the failure count still counts every worker up."""
    from mecefo_exp.failures import Trace, make_trace
    from mecefo_exp.failures.events import JOB
    from mecefo_exp.failures.trace_file import read_trace_csv

    cfg = preset(horizon_factor=1)
    trace = make_trace(cfg, 65536, 1.0, int(DAYS54), seed=0, real_time=True)  # 54 days: ~252 job-wide faults
    jobs = [e for e in trace.events if e.worker == JOB]
    assert abs(len(jobs) / 2 - 4 * 63) < 3.29 * math.sqrt(4 * 63)
    assert len(trace.events) < 60_000  # the ~1,400 hardware faults' 16-32 events each, and 2 per job-wide fault
    t = jobs[0].time
    assert trace.stats_until(t + 1e-9)["failures"] >= 65536 - 8 * sum(1 for e in trace.events if e.time < t)
    path = Path(tempfile.mkdtemp()) / "trace.csv"
    trace.write_csv(path)
    assert "job" in path.read_text()
    again = Trace(read_trace_csv(str(path), 65536, 1.0), 65536, trace.horizon_s, trace.expected)
    assert [(round(e.time, 6), e.worker, e.kind) for e in again.events] == [
        (round(e.time, 6), e.worker, e.kind) for e in trace.events
    ]


@pytest.mark.parametrize(
    "rows, says",
    [
        (["1.0,job,fail"], "line 2: the `job` fail"),
        (["1.0,job,fail", "2.0,job,recover"], "line 3: the `job` fail of line 2"),
        (["1.0,job,fail", "1.0,3,fail"], "line 3: the `job` fail of line 2"),
        (["1.0,job,recover"], "line 2: a `job` recover row must follow"),
    ],
)
def test_a_job_row_without_its_recovery_is_one_clear_line(tmp_path, rows, says):
    from mecefo_exp.failures.events import TraceError
    from mecefo_exp.failures.trace_file import read_trace_csv

    path = tmp_path / "t.csv"
    path.write_text("time,worker,event\n" + "\n".join(rows) + "\n")
    with pytest.raises(TraceError, match=re.escape(says)) as e:
        read_trace_csv(str(path), 8, 1.0)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("gpus", [1024, 4096, 16384])
def test_research_cluster_job_mttf_is_the_papers_fit(gpus):
    """Under failure=rsc1 the job's mean time to failure on N GPUs is Kokolis et al.'s fit,
    1 / (N / 8 nodes x 6.50 failures per thousand node-days): 28.8 h at 1,024 GPUs, 7.2 h at 4,096,
    1.80 h at 16,384 (the paper's projection, 1.8 h), within the Poisson interval of the ~2,000
    failure instants counted (the repair keeps a failed node out for 600 s, a 1e-4 share of its time)."""
    from mecefo_exp.failures import make_trace

    cfg = compose_cfg(["failure=rsc1"]).failure
    fit_h = 1.0 / (gpus / 8 * 6.50e-3) * 24
    assert {1024: 28.8, 4096: 7.2, 16384: 1.8}[gpus] == pytest.approx(fit_h, abs=0.06)
    n = 2000
    cfg.horizon_factor = 1
    run_s = n * fit_h * 3600.0
    trace = make_trace(cfg, gpus, 1.0, int(run_s), seed=3, real_time=True)
    instants = len({e.time for e in trace.events if e.kind == "fail"})
    assert abs(instants - n) < 3.29 * math.sqrt(n), instants
    assert run_s / instants / 3600.0 == pytest.approx(fit_h, rel=3.29 / math.sqrt(n))
    assert trace.expected_mtbf_s(run_s) / 3600.0 == pytest.approx(fit_h, rel=1e-3)
    rsc2 = compose_cfg(["failure=rsc2"]).failure
    assert rsc1_over_rsc2(cfg, rsc2) == pytest.approx(6.50 / 2.34, rel=1e-9)


def rsc1_over_rsc2(rsc1, rsc2) -> float:
    """The two clusters' per-node rates, from the presets as written."""
    per_node = [1.0 / (f.paper_workers / f.unit_gpus * f.every_h) for f in (rsc1, rsc2)]
    return per_node[0] / per_node[1]
