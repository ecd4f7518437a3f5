"""The rules a single setting obeys, written on its field (`choices`, `at_least`, `above`,
`within`), and the walk that checks them on a composed config (`check_fields`).

A field's allowed values live on the field (its metadata); `validate` (checks.py) walks them and
says "<section>.<field>=<value>: <why>" in one line. Rules between fields are named functions in
checks.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional

from ..errors import ConfigError


def choices(*allowed: str) -> Dict[str, Any]:
    return {"choices": allowed}


def at_least(bound: float, unit: str = "") -> Dict[str, Any]:
    """value >= bound; `unit` is said after it ("steps", "(0: off)", ...)."""
    return {"ge": bound, "unit": unit}


def above(bound: float, unit: str = "") -> Dict[str, Any]:
    return {"gt": bound, "unit": unit}


def within(lo: float, hi: float, closed: Any = True) -> Dict[str, Any]:
    """lo <= value <= hi (closed=True), lo < value < hi (False) or lo < value <= hi ("right")."""
    return {"within": (lo, hi, closed)}


def _field_error(key: str, value: Any, rule: Mapping[str, Any]) -> Optional[str]:
    """Why `value` breaks the field's rule (None when it does not), in today's words."""
    unit = (" " + rule["unit"]) if rule.get("unit") else ""
    if "choices" in rule and value not in rule["choices"]:
        return f"{key}={value!r}: allowed: {', '.join(rule['choices'])}"
    if "ge" in rule and not value >= rule["ge"]:
        return f"{key}={value}: must be >= {rule['ge']}{unit}"
    if "gt" in rule and not value > rule["gt"]:
        return f"{key}={value}: must be > {rule['gt']}{unit}"
    if "within" in rule:
        lo, hi, closed = rule["within"]
        ok = {True: lo <= value <= hi, False: lo < value < hi, "right": lo < value <= hi}[closed]
        if not ok:
            return (
                f"{key}={value}: must be in {'[' if closed is True else '('}{lo}, {hi}{')' if closed is False else ']'}"
            )
    return None


def check_fields(node: Any, schema: Any, section: str) -> None:
    """Every field of `schema` that carries a rule, checked on the composed `node`."""
    for f in dataclasses.fields(schema):
        if f.metadata and f.name in node and node[f.name] is not None:
            error = _field_error(f"{section}.{f.name}", node[f.name], f.metadata)
            if error:
                raise ConfigError(error)
