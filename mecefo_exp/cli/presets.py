"""What the command line names in conf/'s groups: a preset that does not exist, and the jobs of a sweep.

Both are checked before Hydra sets anything up (`preflight.check_overrides`), each problem one line:

- `unknown_preset`: an option of `experiment=`, `scenario=` or `local=` (optional groups: Hydra
  would run without one) or of any swept group that has no file, naming the ones there are. A
  sweep's options are read as Hydra's sweepers read them: `a,b`, `choice(a,b)`, `glob(...)`.
- `first_job`: a sweep's first job (each swept value at its first option), which the command
  line's keys must compose into; a key no schema has is said here, not by Hydra after its
  set-up. A key that exists only in some of a swept group's presets (`method.rank` while
  sweeping `method=`) is left to each job.
"""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

from ..paths import conf_dir

#: groups the defaults list loads as `optional`: an option that does not exist would be skipped silently
OPTIONAL_GROUPS = ("experiment", "scenario", "local")


def unknown_preset(args: List[str]) -> Optional[str]:
    """A group option that does not exist, in one line naming the ones there are: for `experiment=`,
    `scenario=` and `local=` (optional groups: Hydra would silently run without one) and for every
    value of a sweep (Hydra would say it in 15 lines, after its own set-up)."""
    sweep = any(a in ("-m", "--multirun") for a in args)
    for arg in args:
        key, _, value = arg.lstrip("+~").partition("=")
        folder = conf_dir() / key
        if not value or value == "null" or "." in key or "/" in key or not folder.is_dir():
            continue
        if not sweep and key not in OPTIONAL_GROUPS:  # the others: Hydra's composition says it
            continue
        allowed = group_options(key)
        options = sweep_options(arg, allowed)
        if not options:
            return f"{key}={value}: matches no preset in {folder}; allowed: {', '.join(allowed)}"
        for option in options:
            if option not in allowed:
                return f"{key}={option}: no such preset in {folder}; allowed: {', '.join(allowed)}"
    return None


def group_options(key: str) -> List[str]:
    folder = conf_dir() / key
    allowed = sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml"))
    if key == "local":  # its default is the user's own file, which need not exist
        allowed = sorted(set(allowed) | {"default"})
    return allowed


def sweep_options(arg: str, allowed: Optional[List[str]] = None) -> List[str]:
    """The values an override names as Hydra's sweepers read it: `a,b`, `choice(a,b)`, `glob(...)`
    over `allowed` (a group's options); a plain value by itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob
    from hydra.errors import HydraException

    value = arg.partition("=")[2]
    try:
        override = OverridesParser.create().parse_override(arg.lstrip("~"))
    except HydraException:  # Hydra says it in its own words when it composes
        return [option.strip() for option in value.split(",")]
    if isinstance(glob := override.value(), Glob):
        return glob.filter(allowed or [])
    if override.is_sweep_override():
        return [str(option) for option in override.sweep_string_iterator()]
    return [override.get_value_element_as_str()]


def first_job(args: List[str]) -> Tuple[List[str], Set[str]]:
    """A sweep's first job: every override at its first value; and the groups it sweeps (their
    presets may declare different keys)."""
    job, swept = [], set()
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.lstrip("+~").partition("=")[0]
        group = (conf_dir() / key).is_dir() and "." not in key
        options = sweep_options(arg, group_options(key) if group else None)
        if len(options) > 1 or options != [arg.partition("=")[2]]:
            if group:
                swept.add(key)
            job.append(f"{arg.partition('=')[0]}={options[0]}" if options else arg)
        else:
            job.append(arg)
    return job, swept
