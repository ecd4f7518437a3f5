"""The methods by name: the module and class of each, imported on demand by name.

One line per method. The config layer reads a method's own settings (its class's `Config`)
through here without importing the methods, and no method's imports slow down another's run.
"""

import importlib

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


def method_class(name: str) -> type:
    if name not in REGISTRY:
        raise ValueError(f"method={name!r}: allowed: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(f"mecefo_exp.methods.{module}"), cls)


def method_config(name: str) -> type:
    """The dataclass of method=<name>'s settings (Hydra composes conf/method/<name>.yaml onto it)."""
    return method_class(name).Config
