"""The harness in this process: compose a config as `python run.py` would, check it, run it.

    from mecefo_exp import api
    cfg = api.compose(["experiment=debug", "method=mecefo", "failure=high"])
    summary = api.run(cfg, Path("runs/mine"))

The command line composes with `compose` before Hydra's own start (to say a bad override in one
line); analysis, the artifact replay, the benchmarks and the tests compose and run through these
calls too, so every one of them reads the same config the command line would.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Sequence

from .config import validate
from .config.hydra_glue import register_configs
from .paths import conf_dir

if TYPE_CHECKING:
    from omegaconf import DictConfig


def compose(overrides: Sequence[str] = (), *, check: bool = True, hydra_config: bool = False) -> "DictConfig":
    """The config `python run.py <overrides>` runs (conf/config.yaml and the overrides, Hydra's
    compose API). `check`: its checks too (`validate_run`: a bad value is one ConfigError line).
    `hydra_config`: with the `hydra` node (the run folder Hydra would name, for one)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    GlobalHydra.instance().clear()  # another composition (or Hydra's own start) may hold it
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra_config)
    if check:
        validate_run(cfg)
    return cfg


def validate_run(cfg) -> None:
    """The config's checks, the clock's the config names and the method variant's (which the config
    layer cannot import)."""
    from .methods import check_variant
    from .timing.clocks import check_clock

    validate(cfg)
    check_clock(cfg)
    check_variant(cfg.method, cfg)


def run(cfg, folder: Path) -> Dict:
    """One run of a composed config into `folder`; its summary (summary.json's contents)."""
    from .run.experiment import Experiment

    return Experiment(cfg, Path(folder)).run()
