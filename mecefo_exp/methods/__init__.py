"""One module per fault-tolerance method, all behind the interface of base.Method."""

from ..registry import REGISTRY, method_class, method_config  # noqa: F401  (the registry: one line per method)
from ..registry import named_class as variant_class  # `method.variant`: "package.module:Class"


def check_variant(method_cfg, cfg=None) -> None:
    """method.variant: an importable subclass of the method's class, with the options it reads and
    (given the whole config `cfg`) its own check; ConfigError in one line otherwise. Called with the
    other checks, before any compute."""
    from ..errors import ConfigError

    path = method_cfg.variant
    if not path:
        return
    try:
        cls = variant_class(path)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"method.variant={path!r}: cannot be imported as module:Class ({e})") from None
    base = method_class(method_cfg.name)
    if not issubclass(cls, base):
        raise ConfigError(f"method.variant={path!r} is not a subclass of {base.__name__} (method={method_cfg.name})")
    known = getattr(cls, "OPTIONS", {})
    unknown = sorted(set(method_cfg.variant_options or {}) - set(known))
    if unknown:
        raise ConfigError(
            f"method.variant_options: unknown {unknown}; {cls.__name__} reads: {', '.join(known) or 'none'}"
        )
    problem = cls.check_config(method_cfg, cfg) if cfg is not None else None
    if problem is not None:
        raise ConfigError(f"method.variant={path}: {problem}")


def build_method(cfg, run):
    check_variant(cfg)
    cls = variant_class(cfg.variant) if cfg.variant else method_class(cfg.name)
    return cls(cfg, run)
