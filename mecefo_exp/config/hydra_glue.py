"""Hydra's side of the configuration: the schemas registered with its ConfigStore, and the
resolvers conf/ uses (run folder names, where Hydra writes its record of a resume, the groups
--help lists, paths of files shipped in conf/).

`register_configs()` must run before Hydra composes (run.py, the tests and the benches call it).
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore

from ..registry import REGISTRY, method_config
from .schema import ClusterConfig, Config, DataConfig, FailureConfig, HardwareConfig, LoggerConfig, ModelConfig


def run_name(overrides: str, sep: str = "", limit: int = 120) -> str:
    """A run folder name from Hydra's override_dirname that stays under file-name limits.

    `sep` goes before the name, and only when there is one: the run folder
    `<time>${run_name:...,_}` is `<time>_method=bamboo` with overrides and plain `<time>`
    without (not `<time>_`)."""
    name = overrides.replace("/", "_")
    if not name:
        return ""
    if len(name) > limit:
        import hashlib

        name = name[: limit - 9] + "_" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{sep}{name}"


def hydra_output_subdir(resume: Any, output_dir: str, machine_rank: Any = 0) -> "str | None":
    """Where Hydra writes its record of a job (hydra.output_subdir, relative to the run folder).

    A start writes .hydra/ (config, overrides: how the run was started). A resume, or a
    torchrun restart, of a folder that has one writes .hydra/resume-<n>/ instead, so the
    record of the start survives every resume. (The run's resolved config, what a resume
    reuses, is <run>/config.yaml, written once by the trainer.) The launcher of torchft
    machine m > 0 shares machine 0's run folder and writes .hydra/machine-<m>/. A start in a
    folder that already holds a run (its config.yaml) writes none (None): cli refuses it
    before any compute, and the record of that run stays as it was.
    """
    from pathlib import Path

    if str(machine_rank) not in ("0", "None"):
        return f".hydra/machine-{machine_rank}"

    resuming = str(resume).lower() == "true" or torchrun_restarted()
    if not resuming and (Path(output_dir) / "config.yaml").exists():
        return None
    hydra_dir = Path(output_dir) / ".hydra"
    if not resuming or not (hydra_dir / "config.yaml").exists():
        return ".hydra"
    n = 1 + sum(1 for p in hydra_dir.glob("resume-*") if p.is_dir())
    return f".hydra/resume-{n}"


def torchrun_restarted() -> bool:
    """Whether this process belongs to a later torchrun round than the first: it resumes.
    (tiers/torchrun.py's init_distributed says which round; torch-free here.)"""
    import os

    return os.environ.get("MECEFO_TORCHRUN_ROUND", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) != "0"


def conf_file(relative: str) -> str:
    """The absolute path of a file shipped in conf/ (a checkout's or the wheel's), for presets."""
    from ..paths import conf_dir

    return str(conf_dir() / relative)


#: the largest personal settings file read (conf/local/<name>.yaml): a few lines in practice
MAX_LOCAL_SETTINGS_BYTES = 1024 * 1024


def local_settings_problem(args) -> "str | None":
    """Why the personal settings file the arguments select (conf/local/<name>.yaml, `local=<name>`,
    by default default.yaml when it exists) cannot be read, in one line naming the file, the line
    and the column; None when it reads (or there is none). Hydra would read it only once set up,
    and print the YAML parser's traceback, also for --help and sweeps."""
    import yaml

    from ..bounded_read import InputRefused, read_text_bounded
    from ..paths import conf_dir

    given = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("local=")]
    names = [n.strip().strip("'\"") for n in given[-1].split(",")] if given else ["default"]
    for name in names:
        path = conf_dir() / "local" / f"{name}.yaml"
        if not name or not path.exists():
            continue  # an option that does not exist is Hydra's error, said by the compose check
        try:
            yaml.safe_load(read_text_bounded(path, MAX_LOCAL_SETTINGS_BYTES))
        except (InputRefused, OSError, UnicodeDecodeError) as e:
            return f"{path} (personal settings) cannot be read: {e}"
        except yaml.MarkedYAMLError as e:
            mark = e.context_mark or e.problem_mark
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            what = "; ".join(str(x) for x in (e.context, e.problem) if x)
            return f"{path}{where}: {what} (personal settings: fix or remove the file)"
        except yaml.YAMLError as e:
            return f"{path}: {' '.join(str(e).split())} (personal settings: fix or remove the file)"
    return None


def user_groups() -> str:
    """The config groups a user picks from, one line each (for --help): the folders of conf/,
    without hydra/ (Hydra's own), local/ (personal) and the schema/ groups registered below."""
    from ..paths import conf_dir

    lines = []
    for folder in sorted(p for p in conf_dir().iterdir() if p.is_dir() and p.name not in ("hydra", "local")):
        options = sorted(f.stem for f in folder.glob("*.yaml"))
        if options:
            lines.append(f"{folder.name}: {', '.join(options)}")
    return "\n".join(lines) + "\n"


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (conf/ files extend them)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", run_name)
    if not OmegaConf.has_resolver("hydra_output_subdir"):
        OmegaConf.register_new_resolver("hydra_output_subdir", hydra_output_subdir)
    if not OmegaConf.has_resolver("mecefo_groups"):
        OmegaConf.register_new_resolver("mecefo_groups", user_groups)
    if not OmegaConf.has_resolver("when"):  # ${when:<bool>,<value>}: the value, or null when false
        OmegaConf.register_new_resolver("when", lambda flag, value: value if flag else None)
    if not OmegaConf.has_resolver("either"):  # ${either:<bool>,<a>,<b>}: a when true, else b
        OmegaConf.register_new_resolver("either", lambda flag, a, b: a if flag else b)
    if not OmegaConf.has_resolver("conf_file"):
        OmegaConf.register_new_resolver("conf_file", conf_file)
    if not OmegaConf.has_resolver("node_trace_slots"):  # ${node_trace_slots:<path>,<ready_s>,<default>}
        from ..failures.nodes import trace_slots

        OmegaConf.register_new_resolver("node_trace_slots", trace_slots)
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="schema/model", name="base", node=ModelConfig)
    cs.store(group="schema/data", name="base", node=DataConfig)
    cs.store(group="schema/failure", name="base", node=FailureConfig)
    from ..failures import MODELS, failure_config

    for kind in MODELS:  # each failure model's own settings class, in its file of mecefo_exp/failures/
        cs.store(group="schema/failure", name=kind, node=failure_config(kind))
    cs.store(group="schema/cluster", name="base", node=ClusterConfig)
    cs.store(group="schema/logger", name="base", node=LoggerConfig)
    cs.store(group="schema/hardware", name="base", node=HardwareConfig)
    for name in REGISTRY:  # each method's own settings class, beside it in mecefo_exp/methods/
        cs.store(group="schema/method", name=name, node=method_config(name))
