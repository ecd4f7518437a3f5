"""The conformance suite: every method in `mecefo_exp.methods.REGISTRY` passes it, a method
registered later included (the tests are parametrized over the registry, nothing lists methods).

Six properties, each a plain function `check_*(runs, method, extra=())` that reads only what a
run leaves behind (summary.json, metrics.jsonl, eval.jsonl, events.jsonl) and the command line:

1. exact: an exact method (`exact = True` on its class) under failures has the failure-free losses
   bit for bit; an approximate one (MeCeFO) has them when nothing fails, and stays finite and close
   under failures;
2. resume: a run killed after step k and resumed is the uninterrupted run (losses, clock, events,
   every counter);
3. event-driven: the numerics-free loop that books quiet steps at once is the step-by-step loop;
4. one instant: a recovery and a failure at the same time of the trace end in an ok run whose
   books add up;
5. strict context: the method runs against a proxy of the run that refuses every member
   RunContext does not declare (every run of this suite goes through it);
6. refused settings: a bad value of the method's own settings is one line naming the key and what
   is allowed (ConfigError; exit 2 from the command line), before any compute; and no number or
   word setting takes -1 or a word it does not know (KNOWN_GAPS: what is not so yet).

Runs are shared between the checks (one tiny run serves 1, 2, 4 and 5). The last tests break a
method on purpose (a subclass run as `method.variant`) and assert that a check fails for it.
"""

import copy
import functools
import json
import math
import sys

import pytest
from test_event_driven import assert_same_run

from conftest import MICRO, VOLATILE_SUMMARY, StrictRun, compose_cfg, losses_by_step, read_jsonl, run_records
from mecefo_exp.methods import REGISTRY, method_class

METHODS = tuple(REGISTRY)
REFERENCE = "checkpoint"  # the failure-free losses every method is held to: plain data parallelism
STEPS = 10
# a tiny numerics run: evaluations and a harness checkpoint (trainer.resume_every) inside it
# (one thread: on a busy machine two threads of a tiny model mostly wait for each other, 5x slower)
NUMERICS = [
    f"trainer.max_steps={STEPS}",
    "trainer.eval_every=5",
    "trainer.resume_every=4",
    "trainer.threads=1",
    "seed=0",
]
# in failure-free step times: worker 1 down, then back at the instant worker 2 fails; worker 3 fails
# late, after the resume point of the killed run (all but checkpoint-restart, whose rollback replays)
TRACE = [(2.5, 1, "fail"), (5.5, 1, "recover"), (5.5, 2, "fail"), (8.5, 2, "recover"), (12.5, 3, "fail")]
KILL_AFTER_STEP = 6  # the killed run dies once the row of this step is written
# numerics-free, long enough for runs of quiet steps: a lone failure, two neighbours at one instant
# (a ring's fatal case, two losses in one parity group), everyone back, a recovery and a failure
# at one instant
NF_STEPS = 80
NF_TRACE = [
    (5.5, 1, "fail"),
    (15.5, 1, "recover"),
    (20.5, 2, "fail"),
    (20.5, 3, "fail"),
    (30.5, 2, "recover"),
    (30.5, 3, "recover"),
    (40.5, 0, "fail"),
    (50.5, 0, "recover"),
    (50.5, 1, "fail"),
    (60.5, 1, "recover"),
]
NUMERICS_FREE = ["trainer.numerics=false", f"trainer.max_steps={NF_STEPS}", "trainer.eval_every=0"]


class Killed(BaseException):
    """A run dying mid-way (kill -9's stand-in in this process): not an Exception, so that nothing
    on the way handles it."""


class Runs:
    """Experiments of this suite, each run once and remembered by its overrides; every one
    builds its method against the strict RunContext proxy and keeps the members it read."""

    def __init__(self, root):
        self.root = root
        self.done = {}
        self.traces = {}
        self.composed = {}

    def trace(self, rows):
        key = tuple(rows)
        if key not in self.traces:
            path = self.root / f"trace{len(self.traces)}.csv"
            path.write_text("time,worker,event\n" + "".join(f"{t},{w},{k}\n" for t, w, k in rows))
            self.traces[key] = ["failure=trace", "failure.unit=steps", f"failure.path={path}"]
        return self.traces[key]

    def compose(self, overrides):
        """compose_cfg(MICRO + overrides), composed once per choice of presets (Hydra takes a third
        of a second, the runs less): the settings are then set as Hydra parses them."""
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import OmegaConf

        presets = tuple(o for o in overrides if "." not in o.split("=", 1)[0])
        if presets not in self.composed:
            self.composed[presets] = compose_cfg(MICRO + list(presets))
        cfg = copy.deepcopy(self.composed[presets])
        for override in OverridesParser.create().parse_overrides([o for o in overrides if o not in presets]):
            OmegaConf.update(cfg, override.key_or_group, override.value(), merge=False)
        return cfg

    def experiment(self, overrides, run_dir, seen):
        from mecefo_exp import methods
        from mecefo_exp.config import validate
        from mecefo_exp.run.experiment import Experiment

        cfg = self.compose(overrides)
        validate(cfg)
        real = methods.build_method

        def build(cfg, run):
            return real(cfg, StrictRun(run, seen))

        with pytest.MonkeyPatch.context() as mp:  # wherever the run builds its method from
            for module in [m for name, m in sys.modules.items() if name.startswith("mecefo_exp")]:
                if getattr(module, "build_method", None) is real:
                    mp.setattr(module, "build_method", build)
            return Experiment(cfg, run_dir).run()

    def __call__(self, *overrides):
        """(summary, run folder, the RunContext members the method read)."""
        if overrides not in self.done:
            run_dir, seen = self.root / f"run{len(self.done)}", set()
            self.done[overrides] = (self.experiment(overrides, run_dir, seen), run_dir, seen)
        return self.done[overrides]

    def killed_and_resumed(self, *overrides, after_step):
        """Run until the metrics row of `after_step` is written, die there, resume in the same folder."""
        from mecefo_exp.metrics import RunRecords

        key = ("killed", after_step) + overrides
        if key not in self.done:
            run_dir, seen = self.root / f"run{len(self.done)}", set()
            real = RunRecords.metric

            def metric(records, row):
                real(records, row)
                if row["step"] == after_step:
                    raise Killed(after_step)

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(RunRecords, "metric", metric)
                with pytest.raises(Killed):
                    self.experiment(overrides, run_dir, seen)
            self.done[key] = (self.experiment(overrides + ("resume=true",), run_dir, seen), run_dir, seen)
        return self.done[key]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    yield Runs(tmp_path_factory.mktemp("conformance"))
    torch.set_num_threads(threads)  # trainer.threads=1 set it for the whole process


def with_failures(runs, method, extra=()):
    return runs(f"method={method}", *extra, *NUMERICS, *runs.trace(TRACE))


def failure_free(runs, method, extra=()):
    return runs(f"method={method}", *extra, *NUMERICS, "failure=none")


def val_losses(run_dir):
    """The validation loss at each step evaluated: the last evaluation of a step (replays evaluate again)."""
    return {r["step"]: r["val_loss"] for r in read_jsonl(run_dir / "eval.jsonl")}


def stable_summary(summary):
    """The summary less what a resume may change (wall clock, folder, the resume's record), as JSON text."""
    return json.dumps({k: v for k, v in summary.items() if k not in VOLATILE_SUMMARY}, sort_keys=True)


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


# ---------------------------------------------------------------------------------------- the checks
def check_exact(runs, method, extra=()):
    """Exact: the failure-free losses bit for bit under failures. Approximate: bit for bit when
    nothing fails; finite, and the final validation loss within 5%, under failures."""
    reference, reference_dir, _ = failure_free(runs, REFERENCE)
    hit, hit_dir, _ = with_failures(runs, method, extra)
    assert hit["status"] == "ok" and hit["failures"] >= 2  # the trace's late failure may fall after the last step
    expected = losses_by_step(reference_dir)
    assert sorted(expected) == list(range(STEPS)) and sorted(val_losses(reference_dir)) == [5, STEPS]
    if method_class(method).exact:
        assert losses_by_step(hit_dir) == expected, f"method={method} is exact: its losses are the failure-free ones"
        assert val_losses(hit_dir) == val_losses(reference_dir)
        assert hit["final_val_loss"] == reference["final_val_loss"]
        return
    free, free_dir, _ = failure_free(runs, method, extra)
    assert losses_by_step(free_dir) == expected, f"method={method} without failures is plain data parallelism"
    assert val_losses(free_dir) == val_losses(reference_dir)
    losses = losses_by_step(hit_dir)
    assert sorted(losses) == list(range(STEPS)) and all(finite(v) for v in losses.values()), losses
    assert finite(hit["final_val_loss"])
    assert abs(hit["final_val_loss"] - free["final_val_loss"]) <= 0.05 * free["final_val_loss"]


def check_resume(runs, method, extra=()):
    """A run killed after step KILL_AFTER_STEP and resumed is the uninterrupted run."""
    whole, whole_dir, _ = with_failures(runs, method, extra)
    resumed, run_dir, _ = runs.killed_and_resumed(
        f"method={method}", *extra, *NUMERICS, *runs.trace(TRACE), after_step=KILL_AFTER_STEP
    )
    assert resumed["status"] == "ok"
    (resume,) = resumed["resumes"]
    assert 0 < resume["from_step"] <= KILL_AFTER_STEP + 1  # from a checkpoint inside the run
    differs = f"method={method}: the resumed run differs from the uninterrupted one in its"
    assert losses_by_step(run_dir) == losses_by_step(whole_dir), f"{differs} losses"
    assert resumed["final_val_loss"] == whole["final_val_loss"], f"{differs} final_val_loss"
    assert resumed["sim_time_s"] == whole["sim_time_s"], f"{differs} simulated time"
    assert resumed["time_breakdown"] == whole["time_breakdown"], f"{differs} time_breakdown"
    # every counter, the method's own included (as JSON text: NaN equals NaN there)
    assert stable_summary(resumed) == stable_summary(whole), f"{differs} summary"
    got, expected = run_records(run_dir), run_records(whole_dir)
    for name in expected:
        assert got[name] == expected[name], f"{differs} {name}.jsonl"
    assert any(e["kind"] == "resume" for e in read_jsonl(run_dir / "events.jsonl"))


def check_event_driven(runs, method, extra=()):
    """Numerics-free: the event-driven loop gives the step-by-step loop's summary and events,
    and its rows cover every committed step."""
    trace = runs.trace(NF_TRACE)
    stepped, stepped_dir, _ = runs(f"method={method}", *extra, *NUMERICS_FREE, *trace, "trainer.event_driven=false")
    driven, driven_dir, _ = runs(f"method={method}", *extra, *NUMERICS_FREE, *trace)
    assert stepped["status"] == "ok" and stepped["steps"] == NF_STEPS
    assert stepped["failures"] == sum(k == "fail" for _, _, k in NF_TRACE)
    try:
        assert_same_run(
            stepped, driven, read_jsonl(stepped_dir / "events.jsonl"), read_jsonl(driven_dir / "events.jsonl")
        )
    except AssertionError as e:
        raise AssertionError(f"method={method}: the event-driven run differs from the step-by-step one: {e}") from e
    covered = set()
    for row in read_jsonl(driven_dir / "metrics.jsonl"):
        covered.update(range(row.get("first_step", row["step"]), row["step"] + 1))
    assert covered == set(range(NF_STEPS))


def check_one_instant(runs, method, extra=()):
    """A recovery and a failure at one instant of the trace: the run ends ok and its books add up."""
    summary, run_dir, _ = with_failures(runs, method, extra)
    events = read_jsonl(run_dir / "events.jsonl")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert summary["status"] == "ok" and summary["steps"] == STEPS
    fails = [e for e in events if e["kind"] == "fail"]
    recovers = [e for e in events if e["kind"] == "recover"]
    # the trace's events in its order, up to its late failure (which a quick method may not live to see)
    assert [e["worker"] for e in fails] == [w for _, w, k in TRACE if k == "fail"][: max(2, len(fails))]
    assert len(fails) == summary["failures"]
    assert [e["worker"] for e in recovers] == [w for _, w, k in TRACE if k == "recover"]
    at = lambda es: {e["detail"]["trace_time_s"] for e in es}  # noqa: E731 - when the trace has it happen
    assert at(fails) & at(recovers), "no recovery and failure at one instant of the trace"
    assert all(e["sim_time_s"] >= e["detail"]["trace_time_s"] for e in fails + recovers)  # none before it happens
    if "rollbacks" in summary:
        assert summary["rollbacks"] == sum(e["kind"] == "rollback" for e in events)
    # the clock: its categories add up to the time, none negative; rows and events in time order
    breakdown = summary["time_breakdown"]
    assert all(v >= 0 for v in breakdown.values()), breakdown
    assert math.isclose(sum(breakdown.values()), summary["sim_time_s"], rel_tol=1e-9)
    times = [r["sim_time_s"] for r in rows]
    assert times == sorted(times) and times[-1] <= summary["sim_time_s"]
    assert [e["sim_time_s"] for e in events] == sorted(e["sim_time_s"] for e in events)
    # every step committed, with a finite loss; the tokens are those of the committed steps
    losses = losses_by_step(run_dir)
    assert sorted(losses) == list(range(STEPS)) and all(finite(v) for v in losses.values())
    per_step = rows[0]["tokens"]
    assert summary["tokens_committed"] == STEPS * per_step == rows[-1]["tokens"]
    assert summary["tokens_processed"] >= summary["tokens_committed"]


def check_strict_context(runs, method, extra=()):
    """The method ran against the strict proxy (every run of the suite does), which was really in
    the way: it read the clock, the costs, the event log and the worker count through it."""
    summary, _, seen = with_failures(runs, method, extra)
    assert summary["status"] == "ok" and summary["failures"] > 0
    assert {"clock", "costs", "event", "n_workers"} <= seen, sorted(seen)


@functools.lru_cache(maxsize=None)
def bad_values(method, extra=()):
    """The method's own settings given a bad value of their type (-1 for a number or a number that
    may be null, not_an_option for a word): ({key: bad value} tried, {key: (bad value, message,
    default)} refused with a ConfigError)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from mecefo_exp.config import ConfigError, validate

    base = compose_cfg(MICRO + [f"method={method}", *extra])
    validate(base)
    tried, refused = {}, {}
    for key in sorted(set(base.method) - {"name", "variant", "variant_options"}):
        default = base.method[key]
        if isinstance(default, bool) or not (default is None or isinstance(default, (int, float, str))):
            continue  # switches, lists and tables: their type is Hydra's to check
        bad = "not_an_option" if isinstance(default, str) and default != "auto" else -1
        cfg = copy.deepcopy(base)
        try:
            OmegaConf.update(cfg, f"method.{key}", bad)
        except OmegaConfBaseException:  # the schema's type refuses it (a list that may be null): not a rule
            continue
        tried[key] = bad
        try:
            validate(cfg)
        except ConfigError as e:
            refused[key] = (bad, str(e), default)
    return tried, refused


def check_refused_settings(method, capsys, tmp_path, extra=()):
    """Each refused bad value is one line that names the key and what it allows; on the command
    line: `config error: <that line>` on stderr, exit 2, and no run folder (nothing computed)."""
    from mecefo_exp.cli import entry

    _, refused = bad_values(method, tuple(extra))
    assert refused, f"method={method}: no bad value of its settings was refused"
    for key, (bad, message, default) in refused.items():
        assert "\n" not in message and message.startswith("method."), message
        assert f"{key}={bad}" in message or f"{key}={bad!r}" in message, message
        assert any(word in message for word in ("must", "allowed", "expected", "needs", ">=")), message
        if isinstance(default, str) and default != "auto":
            assert default in message, f"{message!r} does not name the allowed {default!r}"
    key, (bad, message, _) = sorted(refused.items())[0]
    run_dir = tmp_path / f"refused_{method}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            sys,
            "argv",
            ["run.py", *MICRO, f"method={method}", *extra, f"method.{key}={bad}", f"hydra.run.dir={run_dir}"],
        )
        with pytest.raises(SystemExit) as exit_:
            entry()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == f"config error: {message}\n"
    assert not run_dir.exists()


def check_every_setting_refuses_a_bad_value(method, extra=()):
    """No number or word setting of the method takes -1 or a word it does not know."""
    tried, refused = bad_values(method, tuple(extra))
    accepted = {key: bad for key, bad in tried.items() if key not in refused}
    assert not accepted, f"method={method}: these settings take a bad value without a word: {accepted}"


# ---------------------------------------------------------------------------------------- every method
@pytest.mark.parametrize("method", METHODS)
def test_exact_methods_keep_the_failure_free_losses(runs, method):
    check_exact(runs, method)


@pytest.mark.parametrize("method", METHODS)
def test_a_killed_run_resumes_to_the_uninterrupted_run(runs, method):
    check_resume(runs, method)


@pytest.mark.parametrize("method", METHODS)
def test_event_driven_equals_step_by_step(runs, method):
    check_event_driven(runs, method)


@pytest.mark.parametrize("method", METHODS)
def test_a_failure_and_a_recovery_at_one_instant(runs, method):
    check_one_instant(runs, method)


@pytest.mark.parametrize("method", METHODS)
def test_the_method_runs_against_the_declared_context_alone(runs, method):
    check_strict_context(runs, method)


@pytest.mark.parametrize("method", METHODS)
def test_a_refused_setting_is_one_line_before_any_compute(method, capsys, tmp_path):
    check_refused_settings(method, capsys, tmp_path)


# what the checks find today and the method configs' field rules are to fix: when one is fixed its
# test passes, which fails it here (strict): take the method off this list then
KNOWN_GAPS: dict = {}  # method -> what it does not refuse yet (a strict xfail: fixing it fails until removed)


@pytest.mark.parametrize(
    "method",
    [
        pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[m])) if m in KNOWN_GAPS else m
        for m in METHODS
    ],
)
def test_every_number_and_word_setting_refuses_a_bad_value(method):
    check_every_setting_refuses_a_bad_value(method)


# ---------------------------------------------------------------------------------------- the suite's teeth
# Broken copies of a method, each run as `method.variant` (a subclass in place of the method): the
# check that guards what each one breaks must fail for it, while the method itself passes it.
Oobleck = method_class("oobleck")


class AveragesOverTheSurvivors(Oobleck):
    """Still claims to be exact, but scales the gradient of a step run without every worker by
    the survivors' share, as if the global batch had shrunk with them."""

    def before_optimizer(self, plan, result):
        super().before_optimizer(plan, result)
        if plan.degraded:
            for p in self.run.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(0.75)


class ForgetsWhoIsDown(Oobleck):
    """Leaves the workers that are down out of the state a checkpoint carries."""

    def state_dict(self):
        state = super().state_dict()
        state.pop("down")
        return state


class ChargesQuietStepsAgain(Oobleck):
    """Books a run of quiet steps with an overhead that the same steps one by one do not pay."""

    def after_quiet_steps(self, plan, first, last, step_s):
        super().after_quiet_steps(plan, first, last, step_s)
        self.run.clock.charge("ft_overhead", 1e-4 * (last + 1 - first))


class ReadsTheWholeRun(Oobleck):
    """Reaches past RunContext for the run's whole config."""

    def setup(self):
        super().setup()
        self.whole_config = self.run.cfg


@pytest.mark.parametrize(
    "check, broken_method, says",
    [
        (check_exact, AveragesOverTheSurvivors, "method=oobleck is exact: its losses are the failure-free ones"),
        (check_resume, ForgetsWhoIsDown, "the resumed run differs from the uninterrupted one"),
        (check_event_driven, ChargesQuietStepsAgain, "the event-driven run differs from the step-by-step one"),
        (check_strict_context, ReadsTheWholeRun, "run.cfg, which RunContext does not declare"),
    ],
    ids=["exact", "resume", "event_driven", "strict_context"],
)
def test_the_suite_catches_a_broken_method(runs, check, broken_method, says):
    check(runs, "oobleck")  # the method itself passes (its run is shared with the tests above)
    with pytest.raises(AssertionError, match=says):
        check(runs, "oobleck", (f"method.variant={__name__}:{broken_method.__name__}",))
