"""The Oobleck artifact's own simulators, run unmodified on generated node traces: the reference to test against.

    python scripts/artifact_reference.py --artifact <checkout>/tools/simulator [--traces 120] [--seed 0]
        [--extended 100] [--reuse]

Runs Varuna, Oobleck and Bamboo (the artifact's varuna_simulator.py, oobleck_simulator.py and
bamboo_simulator.py, imported from the checkout given) for BERT-large, GPT-3 2.7B and GPT-3 6.7B on
`--traces` traces of mecefo_exp.replay.spot_traces (seeds --seed, --seed + 1, ...), on `--extended` traces of its
generate_extended (seeds 0, 1, ...: big clusters, collapses to a few nodes, removals faster than a restart,
same-millisecond events, long traces; ext_NNNN) and on the artifact's
two scaled spot-instance traces, read as eval_gcp_ec2.py reads them (its gcp_path and ec2_path, unchanged:
it prepares nothing). Each cell runs in two settings: `freq`, the constructor arguments
eval_tput_vs_freq.py passes, and `spot`, those eval_gcp_ec2.py passes; both sets are read from those two
files' run_simulator_on_traces (and the constants utils.py gives them), not restated here. Writes
<out>/traces/<id>.csv and <out>/reference.csv (default out: tests/fixtures/artifact_generated).

samples_per_s is the simulator's Result.average_performance, the number both evaluation scripts plot.
credited_steps counts the (start, end) pairs of its performance series with a non-zero rate, as
calculate_average pairs them; train_start_s is its start_delta; last_step_end_s the end of the last pair;
rate_shift, by how many steps its rate series has run ahead of its time series (Varuna's failed-checkpoint
un-crediting, varuna_simulator.py:1482-1484, lengthens a rate series shorter than 20 entries to 20; from then
on calculate_average weighs each step's interval with the rate of a step that many steps earlier).
A cell that raises is recorded with the exception's class and the artifact line it came from; one that
runs past --cell-timeout is killed and recorded as `Timeout`. The simulators' output is discarded. With
--reuse, a trace whose file is byte for byte the one already in <out>/traces keeps its rows of the existing
reference.csv (the simulators are deterministic): only new or changed traces are simulated.
"""

import argparse
import ast
import contextlib
import csv
import hashlib
import io
import logging
import multiprocessing as mp
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mecefo_exp.replay import spot_traces  # noqa: E402

REPO, BRANCH, COMMIT = "SymbioticLab/Oobleck", "sosp23-artifact", "796655600207cfb59fae5804740ff720f7428fc5"
# git blob ids of the files used, at COMMIT: a checkout (or an archive of one) is checked against them
BLOBS = {
    "varuna_simulator.py": "2d4ebcf367f489f182c6a4d799f4bbd147c0af8a",
    "oobleck_simulator.py": "3a16394b8004190061b71780a5c784df6aceae1b",
    "bamboo_simulator.py": "610ecc7fb032d5184c706b1cef9d111388e2bd28",
    "eval_tput_vs_freq.py": "c6087db63546684d4b836fb3b7d45db8879e5136",
    "eval_gcp_ec2.py": "28db55ab0e1f50f9782ae9133c72ffea56538104",
    "utils.py": "c5e1175888ba1dc39637fab6b4a426ace19eb391",
    "traces/scaled/scale_gcp-trace.csv": "3a97de45f48ca671bc1b4e391d8c412f5fb09c3f",
    "traces/scaled/scale_p3-trace.csv": "4d1dcb832132add08e98bd33de2319f2fa61ae1a",
}
MODELS = {"bert_large": "BERT-large", "gpt3_2_7b": "GPT-3-2_7b", "gpt3_6_7b": "GPT-3-6_7b"}
SYSTEMS = {"varuna": "varuna_simulator", "oobleck": "oobleck_simulator", "bamboo": "bamboo_simulator"}
SETTINGS = {"freq": "eval_tput_vs_freq.py", "spot": "eval_gcp_ec2.py"}
COLUMNS = [
    "trace",
    "model",
    "system",
    "setting",
    "samples_per_s",
    "credited_steps",
    "train_start_s",
    "last_step_end_s",
    "num_steps_complete",
    "rate_shift",
    "status",
    "error",
    "error_at",
]


def git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def module_constants(path: Path) -> dict:
    """Module-level `name = <literal>` assignments of a file."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def constructor_arguments(simdir: Path, script: str) -> dict:
    """{system: (keyword arguments, first line, last line)} of the simulator constructions in `script`'s
    run_simulator_on_traces; names resolve to the script's constants, then utils.py's (its `from utils import *`).
    The trace file and the model are left out: they are the cell's."""
    consts = module_constants(simdir / "utils.py")
    consts.update(module_constants(simdir / script))
    tree = ast.parse((simdir / script).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_simulator_on_traces")
    found = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.endswith("_simulator"):
            system = node.func.id[: -len("_simulator")]
            assert system in SYSTEMS and not node.args and system not in found, (script, node.lineno)
            kwargs = {}
            for k in node.keywords:
                if k.arg == "spot_instance_trace" or k.arg == "model":
                    assert isinstance(k.value, ast.Name), (script, node.lineno, k.arg)
                    continue
                kwargs[k.arg] = consts[k.value.id] if isinstance(k.value, ast.Name) else ast.literal_eval(k.value)
            found[system] = (kwargs, node.lineno, node.end_lineno)
    assert set(found) == set(SYSTEMS), (script, sorted(found))
    return found


# --- the worker: imports the artifact once, runs one cell per request --------------------------------------


def _run_cell(modules, trace_path, model, system, kwargs):
    sim = None
    t0 = time.perf_counter()
    try:
        with (
            open(trace_path, "r") as f,
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            sim = modules[system].Simulator(spot_instance_trace=f, model=model, **kwargs)
            out = sim.simulate()
        result = out[0] if isinstance(out, tuple) else out
    except Exception as e:  # the artifact's own failure: recorded, not ours to fix
        frame = next(
            (fr for fr in reversed(traceback.extract_tb(e.__traceback__)) if fr.filename.endswith("_simulator.py")),
            traceback.extract_tb(e.__traceback__)[-1],
        )
        row = {"status": "error", "error": type(e).__name__, "error_at": f"{Path(frame.filename).name}:{frame.lineno}"}
        row.update(_series(sim))
        return row, time.perf_counter() - t0
    row = {
        "samples_per_s": repr(float(result.average_performance) + 0.0),
        "num_steps_complete": result.num_steps_complete,
        "status": "OOM" if getattr(sim, "step_delta", None) == 0 else "ok",
        "error": "",
        "error_at": "",
    }
    row.update(_series(sim))
    return row, time.perf_counter() - t0


def _series(sim) -> dict:
    if sim is None:
        return {}
    xs, ys = getattr(sim, "performance_xs", []), getattr(sim, "performance_ys", [])
    # each completed step appends (start, rate) and (end, rate) to both series (V:1449-1452, O and B alike);
    # un-crediting zeroes its rates; a failed checkpoint's 20 zeros may lengthen ys alone (rate_shift)
    credited = sum(1 for y in ys if y != 0) // 2
    start = getattr(sim, "start_delta", None)
    return {
        "credited_steps": credited,
        "rate_shift": (len(ys) - len(xs)) // 2,
        "train_start_s": "" if start is None else f"{start / 1000:.3f}",
        "last_step_end_s": f"{round(xs[-1] * 3_600_000) / 1000:.3f}" if xs else "",
    }


def _worker(conn, simdir):
    sys.path.insert(0, simdir)
    logging.disable(logging.CRITICAL)
    import importlib

    modules = {system: importlib.import_module(name) for system, name in SYSTEMS.items()}
    while True:
        task = conn.recv()
        if task is None:
            return
        conn.send(_run_cell(modules, *task))


class Worker:
    def __init__(self, simdir: str):
        self.simdir = simdir
        self.proc = None

    def start(self):
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=_worker, args=(child, self.simdir), daemon=True)
        self.proc.start()

    def run(self, task, timeout_s):
        if self.proc is None or not self.proc.is_alive():
            self.start()
        self.conn.send(task)
        if self.conn.poll(timeout_s):
            try:
                return self.conn.recv()
            except EOFError:
                pass  # the worker died (out of memory, ...)
            self.proc.join()
            self.proc = None
            return {"status": "error", "error": "WorkerDied", "error_at": ""}, float("nan")
        self.proc.terminate()
        self.proc.join()
        self.proc = None
        return {"status": "error", "error": "Timeout", "error_at": f"> {timeout_s:g} s"}, timeout_s

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", required=True, metavar="DIR", help="the checkout's tools/simulator folder")
    ap.add_argument("--traces", type=int, default=120, help="generated traces (seeds --seed, --seed + 1, ...)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--extended", type=int, default=100, help="traces of spot_traces.generate_extended (seeds 0, 1, ...)"
    )
    ap.add_argument("--jobs", type=int, default=1, help="simulator processes run side by side")
    ap.add_argument(
        "--oom-cells",
        choices=["run", "skip-extended"],
        default="skip-extended",
        help="Bamboo on GPT-3 (an all-zero table: out of memory on every trace, after a spin of steps_per_run "
        "steps at one instant that takes most of this script's time): run it on every trace, or leave those "
        "cells out for the extended traces",
    )
    ap.add_argument("--reuse", action="store_true", help="keep the existing rows of traces whose file is unchanged")
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "artifact_generated"))
    ap.add_argument("--cell-timeout", type=float, default=120.0, help="seconds one cell may run")
    args = ap.parse_args()

    simdir = Path(args.artifact).resolve()
    if not (simdir / "varuna_simulator.py").is_file():
        sys.exit(f"--artifact {args.artifact}: no varuna_simulator.py there (give the checkout's tools/simulator)")
    changed = [name for name, blob in BLOBS.items() if not (simdir / name).is_file() or git_blob(simdir / name) != blob]
    if changed:
        sys.exit(f"--artifact {args.artifact}: not the files of {REPO}@{COMMIT}: {', '.join(changed)} differ")
    calls = {setting: constructor_arguments(simdir, script) for setting, script in SETTINGS.items()}
    spot_consts = module_constants(simdir / SETTINGS["spot"])

    out = Path(args.out)
    trace_dir = out / "traces"
    old_files, old_rows = {}, {}
    if args.reuse and trace_dir.exists() and (out / "reference.csv").is_file():
        old_files = {p.stem: p.read_bytes() for p in trace_dir.glob("*.csv")}
        with open(out / "reference.csv") as f:
            for row in csv.DictReader(line for line in f if not line.startswith("#")):
                old_rows.setdefault(row["trace"], []).append(row)
    if trace_dir.exists():
        shutil.rmtree(trace_dir)
    trace_dir.mkdir(parents=True)
    traces = []
    for seed in range(args.seed, args.seed + args.traces):
        tid = f"gen_{seed:04d}"
        spot_traces.write_csv(spot_traces.generate(seed), trace_dir / f"{tid}.csv")
        traces.append(tid)
    for seed in range(args.extended):
        tid = f"ext_{seed:04d}"
        spot_traces.write_csv(spot_traces.generate_extended(seed), trace_dir / f"{tid}.csv")
        traces.append(tid)
    for var in ("gcp_path", "ec2_path"):  # eval_gcp_ec2.py:26-27, simulated as they are (eval_gcp_ec2.py:101)
        src = simdir / spot_consts[var]
        shutil.copyfile(src, trace_dir / src.name)
        traces.append(src.stem)
    n_cells = len(MODELS) * len(SETTINGS) * len(SYSTEMS)
    reused = {
        tid
        for tid in traces
        if old_files.get(tid) == (trace_dir / f"{tid}.csv").read_bytes()
        and len(old_rows.get(tid, ())) >= n_cells - (4 if tid.startswith("ext_") else 0)
    }

    def cells_of(tid):
        return [
            (tid, model, setting, system)
            for model in MODELS
            for setting in SETTINGS
            for system in SYSTEMS
            if not (
                args.oom_cells == "skip-extended"
                and tid.startswith("ext_")
                and system == "bamboo"
                and model != "bert_large"
            )
        ]

    tasks = []  # (trace, model, setting, system) of every cell to simulate, in the file's order
    for tid in traces:
        if tid not in reused:
            tasks += cells_of(tid)
    workers = [Worker(str(simdir)) for _ in range(max(1, args.jobs))]
    free = list(workers)
    lock = threading.Lock()

    def simulate(task):
        tid, model, setting, system = task
        with lock:
            worker = free.pop()
        try:
            kwargs = calls[setting][system][0]
            return worker.run((str(trace_dir / f"{tid}.csv"), MODELS[model], system, kwargs), args.cell_timeout)
        finally:
            with lock:
                free.append(worker)

    results, sim_s, t_wall = {}, 0.0, time.perf_counter()
    try:
        with ThreadPoolExecutor(len(workers)) as pool:
            for k, (task, (cell, took)) in enumerate(zip(tasks, pool.map(simulate, tasks))):
                results[task] = cell
                sim_s += took if took == took else 0.0
                if cell["status"] == "error":
                    print(f"{' '.join(task)}: {cell['error']} at {cell['error_at']}", file=sys.stderr)
                if (k + 1) % 180 == 0:
                    print(f"{k + 1}/{len(tasks)} cells, {time.perf_counter() - t_wall:.0f} s", file=sys.stderr)
    finally:
        for worker in workers:
            worker.close()
    rows = []
    for tid in traces:
        if tid in reused:
            rows.extend({k: row.get(k, "") for k in COLUMNS} for row in old_rows[tid])
            continue
        for task in cells_of(tid):
            row = dict.fromkeys(COLUMNS, "")
            row.update(trace=tid, model=task[1], system=task[3], setting=task[2], **results[task])
            rows.append(row)
    wall = time.perf_counter() - t_wall

    command = (
        "python scripts/artifact_reference.py --artifact <checkout>/tools/simulator "
        f"--traces {args.traces} --seed {args.seed} --extended {args.extended} --oom-cells {args.oom_cells}"
    )
    with open(out / "reference.csv", "w", newline="") as f:
        f.write(
            f"# The Oobleck artifact's simulators ({REPO}, branch {BRANCH}, commit {COMMIT}, tools/simulator/"
            "{varuna,oobleck,bamboo}_simulator.py), run unmodified; made by:\n"
        )
        f.write(f"#   {command}\n")
        for setting, script in SETTINGS.items():
            for system, (kwargs, first, last) in calls[setting].items():
                shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                f.write(f"# {setting}: {system} as {script}:{first}-{last} builds it: {shown}\n")
        f.write(
            "# traces/gen_NNNN.csv = mecefo_exp.replay.spot_traces.generate(NNNN); "
            "traces/ext_NNNN.csv = mecefo_exp.replay.spot_traces.generate_extended(NNNN) (with --oom-cells skip-extended, "
            "no Bamboo GPT-3 rows: out of memory); scale_gcp-trace, "
            "scale_p3-trace = the artifact's traces/scaled/ files that eval_gcp_ec2.py simulates, unchanged\n"
        )
        for line in (
            "samples_per_s = Result.average_performance; num_steps_complete = Result.num_steps_complete",
            "credited_steps = pairs of the performance series with a non-zero rate (as calculate_average pairs)",
            "rate_shift = (len(performance_ys) - len(performance_xs)) / 2: non-zero where varuna_simulator.py:1482 "
            "lengthened the rate series; each interval then carries the rate of the step that many steps earlier",
            "status OOM = Bamboo's all-zero table (step time 0); error = the exception the artifact raised, "
            "error_at = the artifact's line",
        ):
            f.write(f"# {line}\n")
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    errors = sum(r["status"] == "error" for r in rows)
    print(
        f"{len(rows)} cells ({len(traces)} traces, {len(reused)} of them reused), {errors} errors; artifact {sim_s:.1f} s inside the simulators, "
        f"{wall:.1f} s wall; wrote {out / 'reference.csv'}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
