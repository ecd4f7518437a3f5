"""The assumptions an answer of `advise` (and a cell of the decision map) rests on, named as the
config keys that set them, and the other values each could reasonably take.

A failure model states what a fault destroys, how long a repair takes and how a fault is found;
a checkpoint write is cut by a failure or not. None of these is measured for the cluster a user
asks about, so `advise` prints them with the answer and tries the alternatives below on the two
best methods (its robustness line): the value at which the ranking of the two flips, or "none in
range".
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Sequence

from mecefo_exp.failures.classes import CLASSES


class Assumption(NamedTuple):
    key: str  # the config key that sets it
    value: Any  # its value in the config asked about
    meaning: str  # what it says, in words
    alternatives: Sequence[Any]  # other values the robustness line tries, in order


def stated(cfg) -> List[Assumption]:
    """The assumptions of one composed config, in the order `advise` prints them."""
    f, cc = cfg.failure, cfg.cluster
    out: List[Assumption] = []
    if f.kind == "field":
        from mecefo_exp.failures import field

        named = dict(f.job_faults or {})
        for category in field.job_categories(f.name):
            cls = CLASSES[named.get(category, "all_but_storage")]
            causes = ", ".join(c.name for c in field.causes(f.name) if c.category == category)
            others = [c for c in ("processes", "progress", "all_but_storage") if c != cls.name]
            out.append(
                Assumption(f"failure.job_faults.{category}", cls.name, f"{causes}: destroys {cls.destroys}", others)
            )
    if f.kind in ("paper", "poisson", "field") and f.repair == "replace":
        out.append(
            Assumption(
                "failure.replace_s",
                f.replace_s,
                "a failed unit's spare is in place after this many seconds",
                [v for v in (60, 3600, 86400) if v != f.replace_s],
            )
        )
    out.append(
        Assumption(
            "cluster.detection_s",
            cc.detection_s,
            "seconds until a dead process or GPU is found (heartbeat)",
            [v for v in (5, 120) if v != cc.detection_s],
        )
    )
    if f.kind == "field" and any(v == "progress" for v in dict(f.job_faults or {}).values()):
        out.append(
            Assumption(
                "cluster.collective_timeout_s",
                cc.collective_timeout_s,
                "seconds until a hang is found (a collective's timeout)",
                [v for v in (60, 1800) if v != cc.collective_timeout_s],
            )
        )
    write = cfg.method.get("checkpoint_write", "sync")
    out.append(
        Assumption(
            "method.checkpoint_write",
            write,
            "a failure inside a checkpoint write cuts it (sync) or the checkpoint stands (async)",
            ["async" if write == "sync" else "sync"],
        )
    )
    return out


def describe_failure(cfg) -> str:
    f = cfg.failure
    unit = f"; a failure takes {f.unit_gpus} GPUs" if f.unit_gpus > 1 else ""
    return f"failure={f.name} (kind {f.kind}{unit})"


def without(overrides: Sequence[str], key: str) -> List[str]:
    """The overrides without any that set `key` (so the alternative's value is the one used)."""
    return [o for o in overrides if o.lstrip("+").split("=", 1)[0] != key]


def alternative_jobs(assumptions: Sequence[Assumption], base: Dict[str, List[str]]) -> List[Dict]:
    """One job per (assumption, alternative value, method of `base`): its overrides and what it tests."""
    jobs = []
    for a in assumptions:
        for value in a.alternatives:
            for method, overrides in base.items():
                jobs.append(
                    {
                        "key": a.key,
                        "value": value,
                        "method": method,
                        "overrides": without(overrides, a.key) + [f"{a.key}={value}"],
                    }
                )
    return jobs
