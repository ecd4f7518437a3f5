"""A run that talks: event lines, [job N] prefixes, tqdm-safe logging, the resume line, presets."""

import logging
import shlex
import shutil

import pytest

from conftest import ROOT, compose_cfg


def test_each_rollback_and_failure_is_one_info_line(run_exp, fixed_profile, caplog):
    caplog.set_level(logging.INFO, logger="mecefo_exp")
    summary, _ = run_exp(
        "method=checkpoint", "failure=high", "method.checkpoint_interval=4", f"cluster.profile={fixed_profile()}"
    )
    lines = [r.getMessage() for r in caplog.records if r.name == "mecefo_exp.trainer" and r.levelno == logging.INFO]
    rollbacks = [m for m in lines if ": rollback worker" in m]
    fails = [m for m in lines if ": fail worker" in m]
    assert len(rollbacks) == summary["rollbacks"] >= 1 and len(fails) == summary["failures"]
    assert all("\n" not in m and "steps lost" in m for m in rollbacks)
    assert any(": restart worker" in m for m in lines)
    assert not any(": checkpoint" in m for m in lines)  # routine events stay in events.jsonl


def test_event_lines_stop_at_the_limit():
    from mecefo_exp.console import EventPrinter

    log = logging.getLogger("test.events")
    seen = []
    log.info = lambda msg, *a: seen.append(msg % a if a else msg)
    printer = EventPrinter(log, limit=2)
    for step in range(5):
        printer({"kind": "fail", "worker": 1, "step": step, "sim_time_s": 1.0, "detail": {}})
        printer({"kind": "checkpoint", "worker": None, "step": step, "sim_time_s": 1.0, "detail": {}})
    assert len(seen) == 3 and "further events only in events.jsonl" in seen[-1]


def test_the_resume_line_pastes_into_a_shell_and_parses(tmp_path, monkeypatch):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mecefo_exp.console import resume_command

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "runs" / "2026-11-21" / "12-00-00.000001_failure=high,method=checkpoint"
    line = resume_command(folder)
    words = shlex.split(line)  # what the shell hands to python
    assert words[:3] == ["python", "run.py", "resume=true"]
    override = OverridesParser.create().parse_overrides(words[3:])[0]
    assert override.key_or_group == "hydra.run.dir"
    assert override.value() == "runs/2026-11-21/12-00-00.000001_failure=high,method=checkpoint"


def test_a_progress_bar_routes_log_lines_through_tqdm():
    from omegaconf import OmegaConf
    from tqdm.contrib.logging import _TqdmLoggingHandler

    from mecefo_exp.run.experiment import Progress

    root = logging.getLogger()
    console = logging.StreamHandler()
    root.addHandler(console)
    try:
        bar = Progress(OmegaConf.create({"progress": "bar", "log_every": 1}), total=3)
        assert any(isinstance(h, _TqdmLoggingHandler) for h in root.handlers) and console not in root.handlers
        bar.close()
        assert console in root.handlers and not any(isinstance(h, _TqdmLoggingHandler) for h in root.handlers)
    finally:
        root.removeHandler(console)


def test_sweep_jobs_prefix_their_console_lines():
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from mecefo_exp.console import install_console

    root = logging.getLogger()
    console, file = logging.StreamHandler(), logging.FileHandler("/dev/null")
    for h in (console, file):
        h.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(h)
    try:
        install_console(OmegaConf.create({"mode": RunMode.MULTIRUN, "job": {"num": 3}}))
        install_console(OmegaConf.create({"mode": RunMode.MULTIRUN, "job": {"num": 3}}))  # once only
        record = logging.LogRecord("x", logging.INFO, "f", 1, "hello", None, None)
        assert console.format(record) == "[job 3] hello"
        assert file.format(record) == "hello"  # the job's own log file needs no prefix
    finally:
        root.removeHandler(console)
        root.removeHandler(file)
        file.close()


def test_debug_preset_is_tiny_and_evaluates(run_exp):
    cfg = compose_cfg(["experiment=debug"])
    assert cfg.trainer.max_steps <= 20 and cfg.trainer.eval_every > 0 and cfg.model.hidden_size <= 64
    summary, run_dir = run_exp("experiment=debug", "trainer.progress=none", micro=False)
    assert summary["status"] == "ok" and summary["steps"] == cfg.trainer.max_steps
    assert (run_dir / "eval.jsonl").read_text().count("\n") == cfg.trainer.max_steps // cfg.trainer.eval_every


def test_a_local_override_file_is_loaded_last(tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf, ignore=shutil.ignore_patterns("default.yaml"))
    (conf / "local" / "default.yaml").write_text("# @package _global_\ntrainer:\n  threads: 3\nseed: 7\n")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        mine = compose("config", overrides=["seed=9"])
    assert mine.trainer.threads == 3 and mine.seed == 9  # the file applies; the command line still wins
    if not (ROOT / "conf" / "local" / "default.yaml").exists():  # a developer's own file would change it
        assert compose_cfg([]).trainer.threads == 0


def test_help_hides_the_schema_groups():
    from mecefo_exp.config.hydra_glue import user_groups

    text = user_groups()
    assert "schema" not in text and "local" not in text.split(":")[0]
    experiments = next(line for line in text.splitlines() if line.startswith("experiment: "))
    assert {"debug", "paper_mini", "paper_table2", "paper_table3"} <= set(
        experiments[len("experiment: ") :].split(", ")
    )


@pytest.mark.parametrize(
    "bad,needle",
    [
        ("trainer.log_events=-1", "trainer.log_events=-1: must be >= 0"),
        ("logger.mode=sometimes", "logger.mode='sometimes': allowed: online"),
    ],
)
def test_new_keys_are_validated(bad, needle):
    from mecefo_exp.config import ConfigError, validate

    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        validate(compose_cfg([bad]))
