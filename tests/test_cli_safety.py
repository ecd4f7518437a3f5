"""The command line keeps a run folder safe: a resume says when the code
changed and refuses a config.yaml edited by hand (start.json keeps its hash), the printed resume
line and the sweep refusal's command run as printed whatever the folder's name, a run does not
start over a folder that holds a run, and torchrun names its run folder as a plain run does.

Only one test here starts run.py (refused before compute, ~4 s); the ones that run it to the end
are in tests/test_reliability.py (slow, `make test-cli`) and tests/test_torchrun.py (`make test-crash`)."""

import json
import logging
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from conftest import MICRO, ROOT, compose_cfg, run_py

RESUMABLE = ("method=checkpoint", "failure=none", "trainer.max_steps=4", "trainer.eval_every=0")

#: folder names a shell or Hydra's override parser reads as syntax
AWKWARD_NAMES = [
    "12-00-00.000001_failure=high,method=checkpoint",
    "it's",
    'say "hi"',
    "both ' and \"",
    "back\\slash",
    "ends in a backslash\\",
    "quote after backslash\\'s",
    "$HOME and `date`",
    "${now:%H} and \\${x}",
    "bang!",
    "ünïcode and spaces",
]


def _echo_argv(line: str, program: str = "python run.py") -> list:
    """The arguments bash hands to the program when it runs `line` (the program replaced by an echo)."""
    echo = f"{shlex.quote(sys.executable)} -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
    assert line.startswith(program + " "), line
    out = subprocess.run(["bash", "-c", echo + line[len(program) :]], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _hydra_reads(override: str):
    """What Hydra and OmegaConf make of `key=value`: the key and the resolved value."""
    parsed = OverridesParser.create().parse_overrides([override])[0]
    return parsed.key_or_group, OmegaConf.create({"v": parsed.value()}).v


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One short checkpoint run (status ok, checkpoints at steps 3 and 4), made once per module."""
    from mecefo_exp.config import validate
    from mecefo_exp.run.experiment import Experiment

    cfg = compose_cfg([*MICRO, *RESUMABLE])
    validate(cfg)
    run_dir = tmp_path_factory.mktemp("template") / "run"
    assert Experiment(cfg, run_dir).run()["status"] == "ok"
    return run_dir


@pytest.fixture
def a_run(finished_run, tmp_path):
    """A copy of finished_run of this test's own, at tmp_path/run."""
    return Path(shutil.copytree(finished_run, tmp_path / "run", ignore=shutil.ignore_patterns(".run.*")))


def _edit_json(path: Path, **changes) -> None:
    record = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    path.write_text(json.dumps(record))


# ---------------------------------------------------------------- the printed resume line
@pytest.mark.parametrize("name", AWKWARD_NAMES)
def test_the_printed_resume_line_runs_through_bash_for_any_folder_name(name, tmp_path, monkeypatch):
    """`... resume=true "hydra.run.dir='<folder>'"` broke on an apostrophe: run.py read the folder
    as `it\\'s` (and even made that folder). Through bash -c, the line hands Hydra the folder, and
    so does the command line's own reading of it (given_run_dir: check_resume, the lock)."""
    from mecefo_exp.cli.preflight import given_run_dir
    from mecefo_exp.console import resume_command

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "runs" / name
    line = resume_command(folder)
    words = _echo_argv(line)
    assert words[0] == "resume=true" and len(words) == 2, words
    assert _hydra_reads(words[1]) == ("hydra.run.dir", f"runs/{name}")
    assert given_run_dir(words) == f"runs/{name}"
    assert "\n" not in line


def test_a_resume_of_a_folder_named_with_an_apostrophe_finds_it(a_run, tmp_path, monkeypatch):
    from mecefo_exp.cli.preflight import check_resume
    from mecefo_exp.console import resume_command

    named = a_run.rename(tmp_path / "it's a run")
    monkeypatch.chdir(tmp_path)
    words = _echo_argv(resume_command(named))
    assert check_resume(words) is None
    assert not (tmp_path / "it\\'s a run").exists()


def test_an_unquoted_folder_hydra_cannot_parse_is_one_line_with_a_form_that_works():
    from mecefo_exp.cli.preflight import check_overrides

    for folder in ("/tmp/it's", "/tmp/a=1,b=2", "/tmp/a,b"):
        said = check_overrides(["method=checkpoint", f"hydra.run.dir={folder}"])
        assert said is not None and "\n" not in said and "Hydra's override parser" in said, said
        suggested = _echo_argv("python run.py " + said.split("e.g. ", 1)[1])
        assert _hydra_reads(suggested[0]) == ("hydra.run.dir", folder)


# ---------------------------------------------------------------- a run into a used folder
def test_a_start_in_a_folder_that_holds_a_run_is_refused_naming_what_to_do(a_run, tmp_path, monkeypatch):
    """A single run into a folder holding a finished or failed run appended to its files (steps
    twice over); it is refused in one line (sweeps already were) that names the folder and, for a
    run that can be continued, the resume line, which runs as printed."""
    from mecefo_exp.cli.job import used_folder_problem
    from mecefo_exp.config import typed_config

    assert used_folder_problem(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert used_folder_problem(tmp_path / "empty") is None
    refused = tmp_path / "refused"  # only a config error was recorded there, before any compute
    refused.mkdir()
    (refused / "summary.json").write_text(json.dumps({"status": "failed", "error": "config: bad"}))
    assert used_folder_problem(refused) is None

    monkeypatch.setattr(sys, "argv", ["mecefo-exp"])
    run_dir = a_run
    said = used_folder_problem(run_dir)
    assert f"run folder {run_dir} already holds a run (status ok)" in said and "it finished" in said, said
    assert "another hydra.run.dir" in said and "\n" not in said

    _edit_json(run_dir / "summary.json", status="failed")
    monkeypatch.chdir(tmp_path)
    said = used_folder_problem(run_dir)
    assert "(status failed)" in said and "continue that run with:  " in said, said
    words = _echo_argv(said.split("continue that run with:  ", 1)[1], program="mecefo-exp")
    assert words[0] == "resume=true" and _hydra_reads(words[1]) == ("hydra.run.dir", run_dir.name)

    for folder in ("checkpoints", "resume"):
        for path in (run_dir / folder).glob("step_*"):
            path.unlink()
    said = used_folder_problem(run_dir)
    assert "no complete checkpoint to continue from" in said and "resume=true" not in said, said

    # who joins the run there is not refused: a resume, torchft's machines 1.., torchrun's later rounds
    cfg = typed_config(OmegaConf.load(run_dir / "config.yaml"))
    assert used_folder_problem(run_dir, cfg) is not None
    cfg.resume = True
    assert used_folder_problem(run_dir, cfg) is None
    cfg.resume = False
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert used_folder_problem(run_dir, cfg) is None


def test_a_start_in_a_used_folder_leaves_its_hydra_record_as_it_was(tmp_path):
    """Hydra writes .hydra/ before the job runs: a start in a folder that holds a run (a folder a
    config file fixes, which the command line's check does not see) writes none, so the refusal
    leaves that run's record of how it was started."""
    from mecefo_exp.config.hydra_glue import hydra_output_subdir

    assert hydra_output_subdir(False, str(tmp_path)) == ".hydra"
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert hydra_output_subdir(False, str(tmp_path)) is None
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 0\n")
    assert hydra_output_subdir(True, str(tmp_path)) == ".hydra/resume-1"
    assert hydra_output_subdir(False, str(tmp_path), machine_rank=1) == ".hydra/machine-1"


def test_run_py_into_a_used_folder_exits_2_with_one_line_before_anything_is_written(a_run):
    """The one run.py of the fast tier: it is refused before Hydra sets anything up (~4 s)."""
    run_dir = a_run
    _edit_json(run_dir / "summary.json", status="failed")
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out, lines = run_py("trainer.max_steps=4", f"hydra.run.dir={run_dir}")
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: run folder {run_dir} already holds a run (status failed)"), lines[0]
    assert "resume=true" in lines[0]
    after = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k.name not in (".run.lock", ".run.owner")} == {
        k: v for k, v in before.items() if k.name not in (".run.lock", ".run.owner")
    }


# ---------------------------------------------------------------- config.yaml edited by hand
def test_a_config_yaml_edited_by_hand_is_refused_also_when_summary_json_lost_its_hash(a_run):
    """The hash lived in summary.json only: with it gone, an edited config.yaml was resumed.
    start.json, written beside config.yaml at the start, keeps it too."""
    from mecefo_exp.cli.preflight import check_resume, resume_warning

    run_dir = a_run
    start = json.loads((run_dir / "start.json").read_text())
    assert set(start) == {"config_sha256", "git_sha", "source_sha256", "at"}
    args = ["resume=true", f"hydra.run.dir={run_dir}"]
    assert check_resume(args) is None and resume_warning(args) is None

    _edit_json(run_dir / "summary.json", config_sha256=None)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["trainer"]["lr"] = config["trainer"]["lr"] * 2
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    said = check_resume(args)
    assert said is not None and "\n" not in said, said
    assert "config.yaml was edited after the run started" in said and "start.json" in said, said

    # a run from before start.json and the hash: the resume cannot check, and says so in one line
    (run_dir / "start.json").unlink()
    assert check_resume(args) is None
    warned = resume_warning(args)
    assert warned is not None and "\n" not in warned and "cannot be checked for edits" in warned, warned


def test_the_console_settings_a_resume_may_change_do_not_count_as_an_edit(a_run):
    """The torchft launcher writes config.yaml again on a resume, with trainer.progress or
    trainer.log_events as the resume typed them: that is not an edit. A hash recorded the old way
    (`resume` alone left out) is still accepted."""
    from mecefo_exp.run.resume import config_edited, config_sha256

    run_dir = a_run
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["trainer"].update(progress="lines", log_events=3)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    assert config_edited(run_dir) is None
    legacy = config_sha256(run_dir, legacy=True)
    _edit_json(run_dir / "start.json", config_sha256=legacy)
    assert config_edited(run_dir) is None
    config["seed"] = 7
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    assert config_edited(run_dir) is not None


# ---------------------------------------------------------------- a resume after the code changed
def test_a_resume_after_the_code_changed_warns_in_one_line_and_records_both(a_run, run_exp, tmp_path, caplog):
    """A resume with other code than the run last ran used to say nothing. It warns, in one line
    naming what changed (commit, package source hash: old -> new), and the resume record keeps the
    code it ran and the code it followed. It does not refuse: a researcher resumes after a bug fix;
    whether the run stays exact depends on what the change touches, which a hash cannot tell."""
    from mecefo_exp.run.resume import code_identity

    run_dir = a_run
    (tmp_path / "run1").symlink_to(run_dir)  # run_exp numbers its folders: resume the copy
    with caplog.at_level(logging.WARNING):
        summary, _ = run_exp(*RESUMABLE, "resume=true")
    assert summary["status"] == "ok" and summary["resumes"][-1]["code"] == code_identity()
    assert "code_changed_from" not in summary["resumes"][-1]
    assert not [r for r in caplog.records if "other code" in r.getMessage()]

    old = {"git_sha": "0123456789abcdef0123456789abcdef01234567", "source_sha256": "ab" * 32}
    _edit_json(run_dir / "summary.json", **old)
    (tmp_path / "run2").symlink_to(run_dir)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary, _ = run_exp(*RESUMABLE, "resume=true")
    record = summary["resumes"][-1]
    assert record["code_changed_from"] == old and record["code"] == code_identity()
    (said,) = [r.getMessage() for r in caplog.records if "other code" in r.getMessage()]
    assert "\n" not in said and "abababababab -> " in said, said
    if code_identity()["git_sha"]:  # a checkout: the commit is named too
        assert "commit 0123456789ab -> " in said, said
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["resumes"][-1]["code_changed_from"] == old
    assert on_disk["source_sha256"] == code_identity()["source_sha256"]


def test_the_code_a_run_last_ran_falls_back_to_the_start_when_summary_json_lost_it(a_run):
    from mecefo_exp.run.resume import code_change, last_code

    run_dir = a_run
    start = json.loads((run_dir / "start.json").read_text())
    _edit_json(run_dir / "summary.json", git_sha=None, source_sha256=None)
    assert last_code(run_dir) == {"git_sha": start["git_sha"], "source_sha256": start["source_sha256"]}
    assert (
        code_change({"git_sha": None, "source_sha256": "a" * 64}, {"git_sha": "b" * 40, "source_sha256": "a" * 64})
        is None
    )
    assert (
        code_change({"git_sha": "c" * 40 + "-dirty"}, {"git_sha": "d" * 40})
        == "commit cccccccccccc-dirty -> dddddddddddd"
    )


def test_the_source_hash_follows_the_package_source(tmp_path):
    from mecefo_exp.run.record import source_sha256

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    (pkg / "data.yaml").write_text("not: code\n")
    first = source_sha256.__wrapped__(pkg)
    (pkg / "data.yaml").write_text("still: not code\n")
    assert source_sha256.__wrapped__(pkg) == first
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert source_sha256.__wrapped__(pkg) != first
    assert re.fullmatch(r"[0-9a-f]{64}", source_sha256())


# ---------------------------------------------------------------- the sweep refusal's commands
def _sweep_with_one_job(tmp_path, a_run, status):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    job = sweep / "0_seed=0_method=checkpoint,trainer.max_steps=4"
    a_run.rename(job)
    (job / ".hydra").mkdir(exist_ok=True)
    _edit_json(job / "summary.json", status=status)
    return sweep, job


def test_the_sweep_refusal_ends_with_a_resume_line_that_runs_as_printed(a_run, tmp_path, monkeypatch):
    """The hint was `python run.py resume=true hydra.run.dir=<job folder>`: a placeholder, and a
    job folder's name (= and ,) that Hydra cannot read unquoted."""
    from mecefo_exp.cli.sweeps import job_folders, used_sweep_folder

    sweep, job = _sweep_with_one_job(tmp_path, a_run, "failed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mecefo-exp", "-m", f"hydra.sweep.dir={sweep}"])
    said = used_sweep_folder(sweep, job_folders(sweep))
    assert "\n" not in said and "give another hydra.sweep.dir" in said, said
    words = _echo_argv(said.split("with:  ", 1)[1], program="mecefo-exp")
    assert words[0] == "resume=true" and _hydra_reads(words[1]) == ("hydra.run.dir", f"sweep/{job.name}")


def test_the_sweep_refusal_of_a_finished_sweep_gives_this_sweep_into_a_new_folder(a_run, tmp_path, monkeypatch):
    from mecefo_exp.cli.sweeps import job_folders, used_sweep_folder

    sweep, _ = _sweep_with_one_job(tmp_path, a_run, "ok")
    monkeypatch.chdir(tmp_path)
    argv = ["run.py", "-m", "method=checkpoint,mecefo", "trainer.lr=choice(0.1,0.2)", f"hydra.sweep.dir={sweep}"]
    monkeypatch.setattr(sys, "argv", argv)
    said = used_sweep_folder(sweep, job_folders(sweep))
    assert "every one of them finished" in said and "\n" not in said, said
    command = said.split("instead:  ", 1)[1]
    program = command.split(" -m ", 1)[0]
    assert program.endswith("python run.py") or program.endswith("python3 run.py"), program
    words = _echo_argv(command, program=program)
    assert words[:3] == argv[1:4]
    key, fresh = _hydra_reads(words[3])
    assert key == "hydra.sweep.dir" and re.fullmatch(r"sweep_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", fresh), fresh


# ---------------------------------------------------------------- torchrun's run folder
def _plain_run_dir(args):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(args), return_hydra_config=True).hydra.run.dir


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["resume=false"],
        ["cluster=torchrun", "method=bamboo", "seed=3", "failure=trace", "failure.path=/tmp/x.csv"],
        ["experiment=debug", "cluster=torchrun"],
        ["cluster=torchrun"] + [f"trainer.lr=0.00{i}" for i in range(1, 10)] * 3,
    ],
)
def test_torchrun_names_its_run_folder_as_a_plain_run_does(args):
    """Under torchrun, rank 0 proposed `runs/<date>/<time>_<its own join of the arguments>`: a
    trailing `_` without overrides, seed and paths in the name, the preset's folder ignored
    (experiment=debug writes under runs/debug/). It now composes hydra.run.dir as Hydra does."""
    from mecefo_exp.cli.command import torchrun_run_dir

    stamp = re.compile(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d\.\d{6}")
    ours, plain = torchrun_run_dir(args), _plain_run_dir([a for a in args if not a.startswith("resume=")])
    assert stamp.sub("<t>", ours) == stamp.sub("<t>", plain), (ours, plain)
    assert not ours.endswith("_") and "seed=" not in ours and "failure.path" not in ours
