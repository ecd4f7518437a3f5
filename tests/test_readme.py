"""The README's commands work when pasted: every run.py / mecefo-exp line in its shell blocks
parses as Hydra overrides and composes into a valid config; the cheap ones run at a tiny size."""

import re
import shlex

import pytest

from conftest import MICRO, ROOT, compose_cfg

PROGRAMS = ("run.py", "mecefo-exp")
FLAGS = {"-m", "--multirun"}


def _drop_hydra_flags(args):
    """Overrides only: Hydra's flags (--help, --cfg job, --info, -sc ...) with their values go."""
    out, multirun, skip = [], False, False
    for a in args:
        if skip:
            skip = False
        elif a in FLAGS:
            multirun = True
        elif a in ("--cfg", "-c", "--info", "-i", "--shell-completion", "-sc", "--package", "-p"):
            skip = a not in ("--info", "-i")  # --info takes an optional value; none in the README
        elif a.startswith("-"):
            continue  # --help, --hydra-help, --resolve
        else:
            out.append(a)
    return out, multirun


def readme_commands():
    """(line, arguments after the program, multirun?) for each command in the README's ```bash blocks."""
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)  # as the shell splits it: quotes removed
            at = next((i for i, w in enumerate(words) if w.endswith(PROGRAMS)), None)
            if at is None:
                continue
            args, multirun = _drop_hydra_flags(words[at + 1 :])
            found.append((line.strip(), args, multirun))
    return found


COMMANDS = readme_commands()


def test_the_readme_has_the_commands_this_test_expects():
    lines = [c[0] for c in COMMANDS]
    assert len(COMMANDS) >= 8
    assert any("resume=true" in line for line in lines)
    assert any("experiment=debug" in line for line in lines)
    assert any(line.startswith("mecefo-exp") for line in lines)


def _single_values(args):
    """Hydra's parser on the command line as typed; a sweep (a,b) composes with its first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = []
    for o in OverridesParser.create().parse_overrides(args):  # raises on e.g. an unquoted '=' in a value
        if o.is_hydra_override() or o.input_line.startswith("hydra."):
            continue  # hydra.run.dir=..., hydra/launcher=...: parsed above, not part of the job's config
        if o.is_sweep_override():
            value = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={value}")
        else:
            out.append(o.input_line)
    return out


@pytest.mark.parametrize("line,args,multirun", COMMANDS, ids=[c[0][:60] for c in COMMANDS])
def test_readme_command_parses_and_composes(line, args, multirun, monkeypatch):
    from mecefo_exp.config import validate

    if line.startswith("torchrun"):  # what torchrun puts in each rank's environment
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", "4")

    overrides = _single_values(args)
    if "resume=true" in overrides:
        value = next(a for a in args if a.startswith("hydra.run.dir="))
        assert value.startswith("hydra.run.dir='") and value.endswith("'"), f"unquoted run folder in: {line}"
    cfg = compose_cfg(overrides)
    validate(cfg)


# runs: single runs of the simulated tier; not sweeps, resumes, torchrun or torchft (tests/test_torchft.py runs
# its launcher), --help/--cfg/--info (they run
# nothing) or data=c4 (needs C4 on disk; tests/test_c4.py runs it on shards it writes)
CHEAP = [
    c
    for c in COMMANDS
    if not c[2]
    and not any(
        w in c[0]
        for w in ("resume=true", "cluster=torch", "--help", "--cfg", "--info", "data=c4", "cluster.device=cuda")
    )
]


@pytest.mark.slow
@pytest.mark.parametrize("line,args,multirun", CHEAP, ids=[c[0][:60] for c in CHEAP])
def test_readme_command_runs_at_a_tiny_size(line, args, multirun, tmp_path):
    """The command's own overrides, then a tiny shape and 2 steps (a numerics-free line, or a scenario, keeps its shape)."""
    from mecefo_exp.config import validate
    from mecefo_exp.run.experiment import Experiment

    overrides = _single_values(args)
    numerics = compose_cfg(overrides).trainer.numerics  # a numerics-free line (or preset) is cheap at any size
    tiny = (
        [o for o in MICRO if not o.startswith(("trainer.max_steps", "model=", "model."))]
        if numerics and not any(o.startswith("scenario=") for o in overrides)
        else []
    )
    cfg = compose_cfg(overrides + tiny + ["trainer.max_steps=2", "trainer.eval_every=0", "trainer.progress=none"])
    validate(cfg)
    summary = Experiment(cfg, tmp_path / "run").run()
    assert summary["status"] == "ok" and summary["steps"] == 2


# ------------------------------------------------------------------ analysis/README.md
def analysis_readme_commands():
    """(line, module, arguments) for each `python -m analysis...` line in analysis/README.md's blocks."""
    text = (ROOT / "analysis" / "README.md").read_text()
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.strip().startswith("python -m "):
                continue
            words = shlex.split(line, comments=True)
            if len(words) >= 3:
                found.append((line.strip(), words[2], words[3:]))
    return found


ANALYSIS_COMMANDS = analysis_readme_commands()


def test_analysis_readme_lists_its_commands():
    modules = {m for _, m, _ in ANALYSIS_COMMANDS}
    assert {"analysis", "analysis.collect", "analysis.paper_scale", "analysis.published"} <= modules


class _Parsed(Exception):
    """Raised by the stand-in parser: the arguments parsed, nothing of the command's work runs."""


@pytest.mark.parametrize("line,module,args", ANALYSIS_COMMANDS, ids=[c[0][:60] for c in ANALYSIS_COMMANDS])
def test_analysis_readme_command_parses(line, module, args, monkeypatch):
    """Each line's options are ones its module's parser knows: its main() parses them with a
    parser that stops right after parsing (no folder is read, no sweep is run)."""
    import argparse
    import importlib

    entry = {"analysis": "analysis.figures"}.get(module, module)
    mod = importlib.import_module(entry)
    known = argparse.ArgumentParser.parse_known_args

    def parse_then_stop(self, argv=None, namespace=None):
        _, unknown = known(self, argv, namespace)  # argparse exits 2 here on a malformed line
        assert unknown == [], f"{line}: options its parser does not know: {unknown}"
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    with pytest.raises(_Parsed):
        mod.main(args)


def test_no_documented_command_listens_on_every_interface():
    """The harness binds loopback unless told otherwise; a command the docs give a user (an
    external lighthouse's, in a comment too) must not bind every interface either."""
    wildcard = re.compile(r"--bind[ =]?\s*(\[::\]|::|0\.0\.0\.0)(:\d+)?(\s|$)")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "scripts").glob("*"))]:
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            assert not wildcard.search(line), f"{path.name}:{n}: {line.strip()}"
