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


def method_class(name: str) -> type:
    if name not in REGISTRY:
        raise ValueError(f"method={name!r}: allowed: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def variant_class(path: str) -> type:
    """`method.variant`: "package.module:Class", imported by name (the core never imports a study)."""
    module, _, cls = path.partition(":")
    if not module or not cls:
        raise ValueError("expected package.module:Class")
    return getattr(importlib.import_module(module), cls)


def build_method(cfg, run):
    cls = method_class(cfg.name)
    if cfg.get("variant"):
        cls = variant_class(cfg.variant)
    return cls(cfg, run)
