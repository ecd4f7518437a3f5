"""What a whole-job fault destroys decides what each method restores from (failures/classes.py).

A recorded trace's `job` rows name their class in a fourth column; each test runs one method on the
same trace under two classes and reads where its restart came from."""

import pytest

from conftest import read_jsonl
from mecefo_exp.failures.classes import CLASSES, HOST_SNAPSHOT, REPLICA_GPU, STORAGE, fault_class, restore_source


def job_trace(tmp_path, fault: str, at: float = 6.5):
    path = tmp_path / f"job_{fault or 'none'}.csv"
    if fault:
        path.write_text(f"time,worker,event,fault\n{at},job,fail,{fault}\n{at},job,recover,{fault}\n")
    else:
        path.write_text(f"time,worker,event\n{at},job,fail\n{at},job,recover\n")
    return path


def run_with(run_exp, tmp_path, method, fault, *more):
    return run_exp(
        f"method={method}",
        "failure=trace",
        "failure.unit=steps",
        f"failure.path={job_trace(tmp_path, fault)}",
        "trainer.numerics=false",
        *more,
    )


def restarts(run_dir):
    return [r["detail"] for r in read_jsonl(run_dir / "events.jsonl") if r["kind"] == "restart"]


def test_the_vocabulary_and_the_matching():
    assert set(CLASSES) == {"unit", "processes", "progress", "all_but_storage"}
    assert fault_class("").name == "all_but_storage"  # a job row that names no class: as before
    with pytest.raises(ValueError, match="allowed"):
        fault_class("meteor")
    jit, reft, checkpoint = (REPLICA_GPU, STORAGE), (HOST_SNAPSHOT, STORAGE), (STORAGE,)
    assert restore_source(CLASSES["progress"], jit) == REPLICA_GPU
    assert restore_source(CLASSES["processes"], jit) == STORAGE
    assert restore_source(CLASSES["processes"], reft) == HOST_SNAPSHOT
    assert restore_source(CLASSES["all_but_storage"], reft) == STORAGE
    assert all(restore_source(c, checkpoint) == STORAGE for c in CLASSES.values())


def test_jit_checkpoints_from_a_healthy_replica_after_a_hang_not_after_a_crash(run_exp, tmp_path):
    hang, hang_dir = run_with(run_exp, tmp_path, "jit", "progress")
    crash, crash_dir = run_with(run_exp, tmp_path, "jit", "processes")
    assert hang["just_in_time_checkpoints"] == 1 and restarts(hang_dir)[0]["source"] == "a healthy replica"
    assert crash["just_in_time_checkpoints"] == 0 and restarts(crash_dir)[0]["from_step"] == 0
    assert hang["time_breakdown"]["lost_work"] < crash["time_breakdown"]["lost_work"]
    fail = next(r for r in read_jsonl(hang_dir / "events.jsonl") if r["kind"] == "fail")
    assert fail["detail"]["fault"] == "progress" and fail["detail"]["restores_from"] == REPLICA_GPU


def test_reft_restores_from_host_memory_after_a_crash_and_from_disk_when_the_hosts_are_gone(run_exp, tmp_path):
    crash, crash_dir = run_with(run_exp, tmp_path, "reft", "processes", "method.snapshot_every=2")
    gone, _ = run_with(run_exp, tmp_path, "reft", "all_but_storage", "method.snapshot_every=2")
    assert crash["memory_restores"] == 1 and crash["fatal"] == 0
    assert restarts(crash_dir)[0]["source"] == "memory" and restarts(crash_dir)[0]["lost"] == []
    assert gone["memory_restores"] == 0 and gone["fatal"] == 1


def test_a_job_row_without_a_class_is_everything_but_storage_as_before(run_exp, tmp_path):
    plain, _ = run_with(run_exp, tmp_path, "reft", "", "method.snapshot_every=2")
    named, _ = run_with(run_exp, tmp_path, "reft", "all_but_storage", "method.snapshot_every=2")
    for key in ("rollbacks", "fatal", "memory_restores", "sim_time_s", "lost_steps"):
        assert plain[key] == named[key], key


def test_a_hang_is_found_by_the_collective_timeout_not_the_heartbeat(run_exp, tmp_path):
    crash, _ = run_with(
        run_exp,
        tmp_path,
        "checkpoint",
        "processes",
        "cluster.scale_stalls=false",
        "cluster.collective_timeout_s=100",
        "cluster.detection_s=10",
    )
    hang, _ = run_with(
        run_exp,
        tmp_path,
        "checkpoint",
        "progress",
        "cluster.scale_stalls=false",
        "cluster.collective_timeout_s=100",
        "cluster.detection_s=10",
    )
    assert hang["time_breakdown"]["stall"] - crash["time_breakdown"]["stall"] == pytest.approx(90.0)


def test_jit_can_keep_a_periodic_fall_back(run_exp, tmp_path):
    with_fallback, _ = run_with(run_exp, tmp_path, "jit", "processes", "method.fallback_every=4")
    assert with_fallback["checkpoint_interval"] == 4
    assert restarts(_)[0]["from_step"] == 4  # the fall-back of step 4, not the seeded start


def test_a_classed_trace_round_trips_through_trace_csv(tmp_path):
    from conftest import compose_cfg
    from mecefo_exp.failures import make_trace
    from mecefo_exp.failures.trace_file import read_trace_csv

    f = compose_cfg(["failure=llama3_taxonomy"]).failure
    trace = make_trace(f, 16384, 1.0, 30 * 86400, seed=0, real_time=True)
    faults = {e.fault for e in trace.events if e.worker < 0}
    assert faults == {"processes", "progress"}, faults
    trace.write_csv(tmp_path / "trace.csv")
    assert read_trace_csv(str(tmp_path / "trace.csv"), 16384, 1.0) == [
        type(e)(float(f"{e.time:.6f}"), e.worker, e.kind, e.fault) for e in trace.events
    ]


def test_a_job_fault_class_names_a_whole_job_category_and_a_class(tmp_path):
    from conftest import compose_cfg
    from mecefo_exp.failures import check_failure

    f = compose_cfg(["failure=llama3_taxonomy", "+failure.job_faults.GPU=progress"]).failure
    assert "not a whole-job category" in check_failure(f, 64)
    f = compose_cfg(["failure=llama3_taxonomy", "failure.job_faults.Unknown=hang"]).failure
    assert "allowed: unit, processes, progress, all_but_storage" in check_failure(f, 64)


def test_a_failure_inside_a_synchronous_write_cuts_it_and_the_checkpoint_does_not_stand(run_exp, tmp_path):
    """Daly's model: the write a failure falls into is lost with it. With checkpoint_write=async
    (copied to memory at once, persisted behind training) the checkpoint stands."""
    clean, clean_dir = run_exp(
        "method=checkpoint",
        "method.checkpoint_interval=4",
        "failure=none",
        "trainer.numerics=false",
        "cluster.scale_stalls=false",
    )
    write = next(
        r for r in read_jsonl(clean_dir / "events.jsonl") if r["kind"] == "checkpoint" and r["detail"]["step"] == 4
    )
    began = write["sim_time_s"] - write["detail"]["cost_s"]
    inside = began + write["detail"]["cost_s"] / 2
    trace = tmp_path / "inside_the_write.csv"
    trace.write_text(f"time,worker,event\n{inside!r},1,fail\n{inside + 1.0!r},1,recover\n")
    runs = {}
    for mode in ("sync", "async"):
        runs[mode] = run_exp(
            "method=checkpoint",
            "method.checkpoint_interval=4",
            "failure=trace",
            "failure.unit=seconds",
            f"failure.path={trace}",
            "trainer.numerics=false",
            "cluster.scale_stalls=false",
            f"method.checkpoint_write={mode}",
        )
    (sync, sync_dir), (lazy, lazy_dir) = runs["sync"], runs["async"]
    assert sync["checkpoint_writes_cut"] == 1 and restarts(sync_dir)[0]["from_step"] == 0
    assert lazy["checkpoint_writes_cut"] == 0 and restarts(lazy_dir)[0]["from_step"] == 4
    cut = next(r for r in read_jsonl(sync_dir / "events.jsonl") if r["kind"] == "checkpoint" and r["detail"].get("cut"))
    assert cut["sim_time_s"] == pytest.approx(inside)  # the failure is handled at its own time
    assert sync["lost_steps"] > lazy["lost_steps"] and sync["status"] == lazy["status"] == "ok"
