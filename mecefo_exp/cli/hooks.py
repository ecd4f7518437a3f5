"""Hydra callbacks named in conf/ (`_target_: mecefo_exp.cli.hooks.CollectCallback`).

The analysis library is the checkout's top-level analysis/ folder; a wheel installs the
same files as `mecefo_exp.analysis` (pyproject.toml, package-dir), so that no package
called plain `analysis` lands in site-packages. This name works in both.
"""

try:
    from ..analysis.callback import STUDIES, CollectCallback  # an installed wheel (or an editable install)
except ModuleNotFoundError as e:
    if e.name != "mecefo_exp.analysis":
        raise
    from analysis.callback import STUDIES, CollectCallback  # a checkout run from its root (python run.py)

__all__ = ["CollectCallback", "STUDIES"]
