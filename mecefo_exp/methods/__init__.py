"""One module per fault-tolerance method, all behind the interface of base.Method."""

import importlib

# method name -> "module:Class" (imported on demand so one method's imports never slow another)
REGISTRY = {
    "checkpoint": "checkpoint:CheckpointRestart",
    "reft": "reft:Reft",
    "baft": "baft:Baft",
    "mecefo": "mecefo:Mecefo",
    "bamboo": "bamboo:Bamboo",
    "oobleck": "oobleck:Oobleck",
}


def build_method(cfg, run):
    if cfg.name not in REGISTRY:
        raise ValueError(f"method={cfg.name!r}: allowed: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[cfg.name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(cfg, run)
