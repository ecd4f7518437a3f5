"""The methods and the tiers by name: the module and class of each, imported on demand by name.

One line per method, one per tier. The config layer reads a method's own settings (its class's
`Config`) and a tier's own checks through here without importing them, and no method's or tier's
imports (torch, torchft) slow down another's run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Type

if TYPE_CHECKING:
    from .methods.base import Method

# method name -> "module:Class" under mecefo_exp.methods
REGISTRY = {
    "checkpoint": "checkpoint:CheckpointRestart",
    "reft": "reft:Reft",
    "baft": "baft:Baft",
    "mecefo": "mecefo:Mecefo",
    "bamboo": "bamboo:Bamboo",
    "oobleck": "oobleck:Oobleck",
    "jit": "jit:JustInTime",
}
#: the method every other is measured against; the studies' probes of a failure-free step and a
#: checkpoint write run it
BASELINE = "checkpoint"


def _load(package: str, spec: str):
    """The attribute a "module:name" spec names, under mecefo_exp.<package>."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(f"mecefo_exp.{package}.{module}"), name)


def named_class(path: str) -> type:
    """A class a config names as "package.module:Class" (`method.variant`, `hardware.clock`), imported
    by name: the core never imports a study's package itself."""
    module, _, cls = path.partition(":")
    if not module or not cls:
        raise ValueError("expected package.module:Class")
    return getattr(importlib.import_module(module), cls)


def method_class(name: str) -> Type[Method]:
    if name not in REGISTRY:
        raise ValueError(f"method={name!r}: allowed: {', '.join(REGISTRY)}")
    return _load("methods", REGISTRY[name])


def method_config(name: str) -> type:
    """The dataclass of method=<name>'s settings (Hydra composes conf/method/<name>.yaml onto it)."""
    return method_class(name).Config


# cluster.name -> "module:Class" under mecefo_exp.tiers
TIERS = {
    "local": "local:LocalTier",
    "torchrun": "torchrun:TorchrunTier",
    "torchft": "torchft.tier:TorchftTier",
}

# cluster.name -> "module:function" checking the settings only that tier has (imports no tensor library)
TIER_CHECKS = {
    "torchrun": "torchrun_launch:check_config",
    "torchft": "torchft.checks:check_config",
}


def tier_class(name: str) -> type:
    return _load("tiers", TIERS[name])


def tier_checks(name: str):
    """cluster=<name>'s own checks, a function of the config raising ConfigError (a no-op where there are none)."""
    return _load("tiers", TIER_CHECKS[name]) if name in TIER_CHECKS else (lambda cfg: None)
