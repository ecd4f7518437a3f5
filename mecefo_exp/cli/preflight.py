"""What the command line is refused for before Hydra sets anything up or writes a folder, each in
one line: an override no schema has or of the wrong type, a preset that does not exist, a run folder
Hydra's parser cannot read, a resume of a folder that cannot be resumed or with changed settings;
and the notes a command gets (one cell of a study). Hydra itself would say most of these over several
lines, with exit 1, after its own set-up.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from pathlib import Path
from typing import List, Optional

from omegaconf import OmegaConf

from .. import api
from ..api import validate_run
from ..config.hydra_glue import local_settings_problem
from ..console import hydra_quoted, shell_quoted
from ..errors import ConfigError
from ..failures import TraceError
from ..run.resume import RESUME_MAY_CHANGE
from .presets import first_job, unknown_preset

#: experiments whose whole study another command runs (not a Hydra sweep of run.py)
STUDY_COMMANDS = {
    "decision_map": "`make decision-map` (python -m analysis.decision_map: 1,008 runs, BENCHMARKS.md says how long)"
}


def one_cell_note(args: List[str]) -> Optional[str]:
    """A study run without -m runs one cell of it; say so, and what runs the whole study."""
    if any(a in ("-m", "--multirun") or a.startswith("hydra.mode=") for a in args):
        return None
    if any(a.split("=", 1)[0] in PRINT_ONLY_FLAGS for a in args):
        return None
    chosen = [a.split("=", 1)[1] for a in args if a.startswith(("experiment=", "+experiment="))]
    if not chosen:
        return None
    name = chosen[-1]
    if name in STUDY_COMMANDS:
        return f"experiment={name} without -m runs one cell of the study; the whole study is {STUDY_COMMANDS[name]}"
    from ..paths import conf_dir

    path = conf_dir() / "experiment" / f"{name}.yaml"
    if path.exists() and "sweeper:" in path.read_text():
        return (
            f"experiment={name} is a sweep: without -m this runs one job of it; the whole sweep is "
            f"`python run.py -m experiment={name}`"
        )
    return None


#: Hydra's flags that print something and run nothing
PRINT_ONLY_FLAGS = ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "--shell-completion", "-sc")


def given_run_dir(args: List[str]) -> Optional[str]:
    """The folder the command line's `hydra.run.dir=...` names, read as Hydra and OmegaConf read it
    (quotes, escaped quotes and backslashes, an escaped `${`); None when there is none, when it
    does not parse (check_overrides says so) or when it holds an interpolation Hydra resolves only
    once set up (`${now:...}`: a new folder)."""
    import re

    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = [a for a in args if a.startswith("hydra.run.dir=")]
    if not given:
        return None
    try:
        value = OverridesParser.create().parse_overrides([given[-1]])[0].value()
    except Exception:
        return None
    if not isinstance(value, (str, int, float)):
        return None
    value = str(value)
    if "${" in value:
        if re.search(r"(?<!\\)(\\\\)*\$\{", value):  # an interpolation, not an escaped `${`
            return None
        value = OmegaConf.create({"dir": value}).dir
    return value


def run_dir_problem(args: List[str]) -> Optional[str]:
    """A `hydra.run.dir=` value Hydra's override parser cannot read (a folder name with an
    apostrophe, a space, ...), in one line with the quoted form that works; None when it reads.
    (Hydra would print its parser's error over several lines after its own set-up.)"""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for arg in args:
        if arg.startswith(("hydra.run.dir=", "hydra.sweep.dir=")):
            try:
                parsed = OverridesParser.create().parse_overrides([arg])[0]
                if not parsed.is_sweep_override() and isinstance(parsed.value(), (str, int, float)):
                    continue
                why = "reads it as a list of values (its `,`)"
            except HydraException:
                why = "cannot read it"
            key, value = arg.split("=", 1)
            return f"{key}={value}: Hydra's override parser {why}: quote the folder, e.g. " + shell_quoted(
                key + "=" + hydra_quoted(value)
            )
    return None


def resuming(args: List[str]) -> bool:
    """Whether the command line asks for a resume (the last resume= wins, as in Hydra)."""
    given = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("resume=")]
    return bool(given) and given[-1].strip("'\"").lower() in ("true", "1", "yes", "on", "y")


def check_overrides(args: List[str]) -> Optional[str]:
    """Compose the config once with Hydra's compose API and return, in one line, why the
    overrides cannot be applied (None when they can). Hydra itself reports a key no schema
    has, a value of the wrong type or an option that does not exist in several lines with
    exit 1, after its own set-up; this says it before anything runs. Sweeps (-m) and Hydra's
    own flags are left to Hydra: a sweep's values are lists that only its sweeper expands."""
    unreadable = local_settings_problem(args) or run_dir_problem(args)  # before Hydra reads them
    if unreadable:
        return unreadable
    unknown = unknown_preset(args)
    if unknown:
        return unknown
    flags = {a for a in args if a.startswith("-")}
    if flags and flags <= {"-m", "--multirun"}:
        return _first_job_problem(args)
    # --help, --info, ... are Hydra's; --cfg (print the config) shows what would run, so it is checked too
    if any(a.startswith("-") and a not in ("--cfg", "-c", "--resolve") for a in args):
        return None
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    try:
        cfg = _compose(args)
    except HydraException as e:
        return _one_line(e)
    except (YAMLError, OmegaConfBaseException) as e:  # e.g. a broken conf/local/default.yaml
        return f"{type(e).__name__}: {' '.join(str(e).split())}"
    if cfg.resume:  # a resume runs the folder's own config (check_resume), validated when it starts
        return None
    try:
        validate_run(cfg)  # a key added with + that no schema has, a bad value: before Hydra writes a folder
    except (ConfigError, TraceError) as e:
        return str(e)
    return None


def _first_job_problem(args: List[str]) -> Optional[str]:
    """A sweep: a key its first job cannot compose with, unless a swept preset may declare it."""
    from hydra.errors import HydraException

    job, swept = first_job(args)
    try:
        _compose(job)
    except HydraException as e:
        key = str(getattr(e.__cause__, "full_key", "") or "")
        return None if not key or key.split(".")[0] in swept else _one_line(e)
    except Exception:  # anything else: each job says it
        return None
    return None


def user_overrides(args: List[str]) -> List[str]:
    return [
        a
        for a in args
        if "=" in a and not a.startswith("-") and not a.lstrip("+~").startswith(("hydra.", "hydra/", "resume="))
    ]


def _compose(args: List[str]):
    cfg = api.compose(user_overrides(args), check=False)
    _COMPOSED[tuple(args)] = cfg
    return cfg


#: configs composed by check_overrides, by their arguments (entry reads one again for the lock)
_COMPOSED: dict = {}


def composed(args: List[str]):
    """The config check_overrides composed for `args`, or None (not composed: a sweep, a flag)."""
    return _COMPOSED.get(tuple(args))


def check_resume(args: List[str]) -> Optional[str]:
    """With resume=true: why the given folder cannot be resumed (None when it can), said
    before Hydra writes anything into it and before any compute."""
    if not resuming(args) or os.environ.get("RANK", "0") != "0":
        return None
    given = given_run_dir(args)
    if not given:
        return (
            "resume=true needs the run's folder: resume=true hydra.run.dir=<folder> (the line each run logs at start)"
        )
    folder = Path(given)
    if not folder.is_dir():
        return f"nothing to resume in {folder}: no such folder"
    if not (folder / "config.yaml").exists():
        return (
            f"nothing to resume in {folder}: it has no config.yaml (not a run folder, or the run was killed "
            "before it started: start it again)"
        )
    try:
        OmegaConf.load(folder / "config.yaml")
    except Exception as e:  # a broken YAML file: say which, in one line
        return f"cannot resume {folder}: its config.yaml cannot be read ({str(e).splitlines()[0]})"
    from ..run.resume import config_edited, config_incomplete

    edited = config_edited(folder)
    if edited:
        return f"cannot resume {folder}: {edited}"
    from ..methods.checkpointing import complete_steps

    if not complete_steps(folder / "checkpoints") and not complete_steps(folder / "resume"):
        return (
            f"nothing to resume in {folder}: no complete checkpoint in {folder / 'checkpoints'} or "
            f"{folder / 'resume'} (the run stopped before its first checkpoint: start it again)"
        )
    incomplete = config_incomplete(folder)
    if incomplete:
        return f"cannot resume {folder}: {incomplete}"
    changed = settings_changed_on_resume(args, folder)
    if changed:
        return (
            f"resume=true continues {folder} as it was started; refused: {'; '.join(changed)} "
            f"(only {', '.join(RESUME_MAY_CHANGE)} may change on resume: start a new run for other settings)"
        )
    return None


def resume_warning(args: List[str]) -> Optional[str]:
    """With resume=true, on a folder check_resume let through: what the resume cannot check, in one
    line (a config.yaml whose start hash no record keeps); None otherwise."""
    if not resuming(args) or os.environ.get("RANK", "0") != "0":
        return None
    folder = given_run_dir(args)
    if not folder:
        return None
    from ..run.resume import config_unchecked

    return config_unchecked(Path(folder))


def settings_changed_on_resume(args: List[str], folder: Path) -> List[str]:
    """'key=typed (the run has stored)' for every override on the command line that differs
    from the run's own config.yaml, outside RESUME_MAY_CHANGE (those _job applies)."""
    from omegaconf import OmegaConf

    typed, stored = _compose(args), OmegaConf.load(folder / "config.yaml")
    changed = []
    for override in user_overrides(args):
        key, value = override.lstrip("+~").split("=", 1)
        key = key.split("@", 1)[0].replace("/", ".")  # a group override (method=bamboo) names its node
        if key in RESUME_MAY_CHANGE:
            continue
        new, old = OmegaConf.select(typed, key), OmegaConf.select(stored, key)
        as_plain = lambda v: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
        if as_plain(new) != as_plain(old):
            was = old.get("name", "...") if OmegaConf.is_dict(old) else old
            changed.append(f"{key}={value} (the run has {key}={was})")
    return changed


def _one_line(e: BaseException) -> str:
    """Hydra's composition error in one line: what it could not do, and why."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    head = lines[0] if lines else type(e).__name__
    if head.startswith("In 'config': Could not find"):  # a config group option that does not exist
        options = [line for line in lines[2:] if not line.startswith(("Config search path", "provider="))]
        if not options:
            return head
        wrong = head.split(": ", 1)[1].strip().strip("'").rsplit("/", 1)[-1]
        near = difflib.get_close_matches(wrong, options, n=1)
        return f"{head.split(': ', 1)[1]}{f' (did you mean {near[0]}?)' if near else ''}; allowed: {', '.join(options)}"
    cause = e.__cause__
    if cause is not None:
        why = str(cause).splitlines()[0].strip()
        schema, key = getattr(cause, "object_type", None), getattr(cause, "key", None)
        if why.startswith("Key ") and dataclasses.is_dataclass(schema):
            why = _no_such_setting(str(key), schema)
        return f"{head.rstrip('.')}: {why}"
    if head.endswith(":") and len(lines) > 1:  # a file of conf/ (conf/local/default.yaml): the cause is in the text
        import re

        from ..config import schema as schemas

        found = re.match(r"Key '(.+)' not in '(\w+)'", lines[1])
        full = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("full_key:")), None)
        schema = getattr(schemas, found[2], None) if found else None
        why = _no_such_setting(found[1], schema) if found and dataclasses.is_dataclass(schema) else lines[1]
        return f"{head} {full + ': ' if full else ''}{why}"
    return head


def _no_such_setting(key: str, schema) -> str:
    from ..config.schema import RENAMED_METHOD_SETTINGS

    names = [f.name for f in dataclasses.fields(schema)]
    if RENAMED_METHOD_SETTINGS.get(key) in names:
        return f"no such setting: {key} is now called {RENAMED_METHOD_SETTINGS[key]}"
    near = difflib.get_close_matches(key, names, n=1)
    return f"no such setting{f' (did you mean {near[0]}?)' if near else ''}; allowed: {', '.join(names)}"
