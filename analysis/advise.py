"""Which method keeps the most training time on your cluster: every method, ranked, with intervals.

    python -m analysis.advise experiment=llama3_405b
    python -m analysis.advise experiment=decision_map cluster.n_workers=4096 failure.every_h=0.3
    python -m analysis.advise hardware=h100_8 model=llama_7b cluster.n_workers=512 ... [--seeds 3]

The overrides are the command line's (`python run.py ...`), run numerics-free (a `method=` among
them is checked and then replaced by each method in turn). Each method runs
`--seeds` times (the same seed is the same failure trace for every method) for 20 mean times between
failures, between 2 h and 7 days of failure-free steps, at most 200,000 steps (fewer if the config asks
for fewer); under field failures (failure=llama3_taxonomy) the fall-back checkpoints of the methods
that do not absorb a whole-job fault are Daly's interval for those faults, as in
analysis/decision_map.py. On Llama 3's cluster (a config whose failure model is `llama3`, the per-GPU
rate alone) advise uses the decision map's model, `failure=llama3_taxonomy` (the same rate, by cause,
whole-job faults included), unless the command line names a failure model.

Printed: the failure model and the assumptions it rests on (analysis/assumptions.py: what each
whole-job cause destroys, repair, detection, the checkpoint write), each method's effective training
time (failure-free time of the steps done / simulated time), mean and 95% interval over seeds, ranked,
the methods that cannot run on the cluster left out with their reason (Bamboo without pipeline stages),
a robustness line (the two best methods, seed 0, under each assumption's alternatives: the value at
which the runner-up is ahead, or none in range; --no-robustness skips it), and the checkpoint interval
Young (1974) and Daly (2006) choose for checkpoint-restart.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Dict, List

from mecefo_exp.registry import BASELINE, method_class

from . import assumptions
from . import closed_forms as cf
from .simulate import METHODS, compose, effective_time, fallback_overrides, mean_interval, run_all

MIN_RUN_S, MAX_RUN_S, MAX_STEPS, MTBF_MULTIPLE = 2 * 3600.0, 7 * 86400.0, 200_000, 20


def probe(overrides: List[str]) -> Dict:
    """The failure-free step, a checkpoint's write and the expected time between failure instants."""
    from mecefo_exp.failures import make_trace
    from mecefo_exp.failures.events import TraceError

    from .simulate import run_cfg

    cfg = compose(overrides + ["trainer.numerics=false", f"method={BASELINE}"])
    ff = compose(
        overrides
        + [
            "trainer.numerics=false",
            f"method={BASELINE}",
            "failure=none",
            "trainer.max_steps=1",
            "method.checkpoint_interval=1",
        ]
    )
    s = run_cfg(ff)
    step_s, write_s = s["clock"]["failure_free_step_s"], s["time_breakdown"]["ft_overhead"] / 2
    real_time = cfg.hardware.get("paper_time") == "real"
    steps = max(1, round(3600.0 / step_s))  # an hour of expectation is enough: it is a rate
    failure = cfg.failure.copy()
    failure.horizon_factor = 1.0
    try:
        trace = make_trace(
            failure, cfg.cluster.n_workers, step_s, steps, cfg.seed, cfg.cluster.paper_run_h, real_time=real_time
        )
    except TraceError as e:
        raise SystemExit(f"advise: {e}") from None
    return {"cfg": cfg, "step_s": step_s, "write_s": write_s, "mtbf_s": trace.expected_mtbf_s(steps * step_s)}


def plan(p: Dict, seeds: int) -> Dict[str, List[List[str]]]:
    """Per method, the overrides of its seeds' runs (besides the user's)."""
    cfg, step_s = p["cfg"], p["step_s"]
    mtbf_s = p["mtbf_s"]
    run_s = MAX_RUN_S if not math.isfinite(mtbf_s) else min(MAX_RUN_S, max(MIN_RUN_S, MTBF_MULTIPLE * mtbf_s))
    steps = max(1, min(MAX_STEPS, cfg.trainer.max_steps, round(run_s / step_s)))
    common = [
        "trainer.numerics=false",
        f"trainer.max_steps={steps}",
        "failure.horizon_factor=3",
        "trainer.eval_every=0",
        "trainer.progress=none",
    ]
    own: Dict[str, List[str]] = {}
    if cfg.failure.kind == "field":
        from mecefo_exp.failures import field as fields

        own = fallback_overrides(p["write_s"], mtbf_s / fields.job_share(), step_s, steps)
    return {m: [common + [f"method={m}"] + own.get(m, []) + [f"seed={s}"] for s in range(seeds)] for m in METHODS}


def robustness(
    assumed, results: List[Dict], jobs: Dict[str, List[List[str]]], overrides: List[str], processes: int
) -> Dict:
    """The winner against the runner-up (seed 0) under each assumption's alternatives: per assumption,
    the first alternative value at which the runner-up is ahead, or None."""
    winner, second = results[0]["method"], results[1]["method"]
    base = {m: overrides + jobs[m][0] for m in (winner, second)}
    tried = assumptions.alternative_jobs(assumed, base)
    # each alternative is one value set on the method's composed config (composed once per process)
    summaries = run_all([(base[t["method"]], {t["key"]: t["value"]}) for t in tried], processes=processes)
    effective = {(t["key"], str(t["value"]), t["method"]): effective_time(s) for t, s in zip(tried, summaries)}
    flips = {}
    for a in assumed:
        flips[a.key] = next(
            (v for v in a.alternatives if effective[(a.key, str(v), second)] > effective[(a.key, str(v), winner)]), None
        )
    return {"winner": winner, "second": second, "flips": flips, "effective": effective}


def with_the_maps_failure_model(overrides: List[str]) -> List[str]:
    """Llama 3's per-GPU rate (failure=llama3) becomes the decision map's model of the same rate by
    cause, unless the command line chose the failure model itself."""
    if any(o.split("=", 1)[0].lstrip("+") == "failure" for o in overrides):
        return list(overrides)
    cfg = compose(overrides + ["trainer.numerics=false"])  # the user's config as given: a bad one stops here
    return list(overrides) + (["failure=llama3_taxonomy"] if cfg.failure.name == "llama3" else [])


def refused_here(cfg) -> Dict[str, str]:
    """The methods whose own check (`check_config`, at their default settings) refuses this config,
    each with its one-line reason: Bamboo in a tensor-parallel layout without pipeline stages."""
    from omegaconf import OmegaConf

    refused = {}
    for m in METHODS:
        cls = method_class(m)
        problem = cls.check_config(OmegaConf.structured(cls.Config), cfg)
        if problem is not None:
            refused[m] = problem
    return refused


def advise(overrides: List[str], seeds: int = 3, processes: int = 2, robust_check: bool = True) -> Dict:
    start = time.perf_counter()
    overrides = with_the_maps_failure_model(overrides)
    p = probe(overrides)
    jobs = plan(p, seeds)
    left_out = refused_here(p["cfg"])  # a method that cannot run on this cluster (Bamboo without stages)
    methods = [m for m in METHODS if m not in left_out]
    flat = [overrides + j for m in methods for j in jobs[m]]
    summaries = run_all(flat, processes=processes)
    results = []
    for i, m in enumerate(methods):
        mine = summaries[i * seeds : (i + 1) * seeds]
        eff = [effective_time(s) for s in mine]
        mean, half = mean_interval(eff)
        first = next((s for s in mine if s.get("status") == "ok"), {})
        interval = first.get("checkpoint_interval")
        if first.get("snapshot_every"):
            interval = f"{first['snapshot_every']} (memory)"
        elif interval and interval >= (first.get("max_steps") or 0):
            interval = "none"  # never written after the first: no fall-back was expected
        errors = [s.get("error") for s in mine if s.get("status") != "ok"]
        results.append(
            {
                "method": m,
                "effective": mean,
                "ci95": half,
                "interval": interval,
                "errors": errors,
                "rollbacks": sum(s.get("rollbacks") or 0 for s in mine) / seeds,
                "steps": mine[0].get("max_steps"),
            }
        )
    results.sort(key=lambda r: -r["effective"] if r["effective"] == r["effective"] else math.inf)
    C, M = p["write_s"], p["mtbf_s"]
    assumed = assumptions.stated(p["cfg"])
    robust = robustness(assumed, results, jobs, overrides, processes) if robust_check and len(results) > 1 else None
    return {
        "results": results,
        "left_out": left_out,
        "step_s": p["step_s"],
        "write_s": C,
        "mtbf_s": M,
        "failure": assumptions.describe_failure(p["cfg"]),
        "assumptions": assumed,
        "robustness": robust,
        "young_s": cf.young_interval(C, M) if math.isfinite(M) else math.inf,
        "daly_s": cf.daly_interval(C, M) if math.isfinite(M) else math.inf,
        "seconds": time.perf_counter() - start,
    }


def report(a: Dict, seeds: int) -> str:
    steps = a["results"][0]["steps"]
    lines = [f"failure model: {a['failure']}", "assumptions (the config key; advise ... <key>=<value> to change one):"]
    lines += [f"  {x.key} = {x.value}: {x.meaning}" for x in a["assumptions"]]
    lines += [
        "",
        f"failure-free step {a['step_s']:.4g} s; checkpoint write C = {a['write_s']:.4g} s; "
        f"mean time between failures M = {a['mtbf_s'] / 3600:.4g} h; each run {steps} steps "
        f"({steps * a['step_s'] / 3600:.3g} h failure-free), {seeds} seeds",
        "",
        f"{'rank':<5}{'method':<12}{'effective training time':>26}{'interval (steps)':>18}{'rollbacks':>11}",
    ]
    for i, r in enumerate(a["results"], 1):
        eff = (
            "failed"
            if r["effective"] != r["effective"]
            else (
                f"{100 * r['effective']:.2f}% ± {100 * r['ci95']:.2f}"
                if r["ci95"] == r["ci95"]
                else f"{100 * r['effective']:.2f}%"
            )
        )
        lines.append(f"{i:<5}{r['method']:<12}{eff:>26}{str(r['interval'] or '-'):>18}{r['rollbacks']:>11.1f}")
        if r["errors"]:
            lines.append(f"     {r['method']}: {r['errors'][0]}")
    for reason in a.get("left_out", {}).values():
        lines.append(f"left out: {reason}")
    rb = a.get("robustness")
    if rb:
        lines += [
            "",
            f"robustness: {rb['winner']} against {rb['second']} (seed 0) under each assumption's alternatives",
        ]
        for x in a["assumptions"]:
            flip = rb["flips"][x.key]
            tried = ", ".join(str(v) for v in x.alternatives)
            lines.append(
                f"  {x.key}: "
                + (f"{rb['second']} ahead at {x.key}={flip}" if flip is not None else f"none in range ({tried})")
            )
    if math.isfinite(a["young_s"]):
        lines += [
            "",
            f"checkpoint-restart interval: Young sqrt(2 C M) = {a['young_s']:.4g} s "
            f"({a['young_s'] / a['step_s']:.1f} steps); Daly's higher order {a['daly_s']:.4g} s "
            f"({a['daly_s'] / a['step_s']:.1f} steps)",
        ]
    lines.append(f"({a['seconds']:.1f} s)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.advise", description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for python run.py")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument(
        "--no-robustness",
        action="store_true",
        help="skip the robustness line (the two best methods under each assumption's alternatives)",
    )
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.processes < 1:
        print("advise: --seeds and --processes must be >= 1", file=sys.stderr)
        return 2
    from mecefo_exp.errors import ConfigError

    try:
        a = advise(args.overrides, args.seeds, args.processes, robust_check=not args.no_robustness)
    except ConfigError as e:
        print(f"advise: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # Hydra's own errors (a group option that does not exist)
        if type(e).__module__.startswith("hydra") or type(e).__name__.endswith("Exception"):
            print(f"advise: {str(e).splitlines()[0]}", file=sys.stderr)
            return 2
        raise
    print(report(a, args.seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
