"""A Hydra callback: at the end of a multirun, collect the sweep and draw its tables and figures.

Enable it in conf/config.yaml:

    hydra:
      callbacks:
        collect:
          _target_: analysis.callback.CollectCallback
          out: null        # default: <sweep dir>/analysis
          figures: true
          study: null      # paper_scale: analysis.paper_scale instead of the default tables

or for one sweep only, on the command line:

    python run.py -m +hydra.callbacks.collect._target_=analysis.callback.CollectCallback ...

It runs in the launching process after every job has returned (also with the joblib
launcher). A failure of the analysis is logged and never fails the sweep: the runs are on
disk, and `python -m analysis <sweep dir>` redoes it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


#: studies with their own analysis (a sweep whose design the default tables do not read)
#: study name -> the module (of this package) whose analyze(roots, out, figures=...) replaces the default
STUDIES = {
    "paper_scale": "paper_scale",
    "convergence": "convergence",
    "oobleck_artifact": "oobleck_artifact",
    "frontier": "frontier",
}


class CollectCallback(Callback):
    """`study`: None for the default analysis (analysis.figures); "paper_scale" for the
    paper-scale Table 2 sweep (conf/experiment/paper_table2.yaml, analysis.paper_scale);
    "convergence" for the Table 3 study (conf/experiment/paper_table3.yaml,
    analysis.convergence: the default analysis plus the change against run length)."""

    def __init__(self, out: Optional[str] = None, figures: bool = True, study: Optional[str] = None) -> None:
        if study is not None and study not in STUDIES:
            raise ValueError(f"CollectCallback: study={study!r}: allowed: null, {', '.join(STUDIES)}")
        self.out = out
        self.figures = figures
        self.study = study
        self._sweep_dir: Optional[Path] = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # resolve once, before the launcher does: ${now:...} is cached on the config, so
        # this is the folder the jobs are written to
        self._sweep_dir = self._resolve(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = self._sweep_dir or self._resolve(config)
        if sweep is None or not sweep.exists():
            log.warning("CollectCallback: sweep folder %s not found, nothing collected", sweep)
            return
        out = Path(self.out) if self.out else sweep / "analysis"
        # this package is `analysis` in a checkout and `mecefo_exp.analysis` in an installed wheel
        module = f"{__package__}.{STUDIES.get(self.study or '', 'figures')}"
        try:
            import importlib

            analyze = importlib.import_module(module).analyze
            analyze([sweep], out, figures=self.figures, verbose=self.study is not None)
            log.info("CollectCallback: tables and figures of %s in %s", sweep, out)
        except Exception:  # the sweep's runs are safe on disk; analysis can be redone by hand
            log.exception(
                "CollectCallback: analysis of %s failed; redo it with: python -m %s %s --out %s",
                sweep,
                module if self.study else __package__,
                sweep,
                out,
            )

    @staticmethod
    def _resolve(config: DictConfig) -> Optional[Path]:
        try:
            return Path(str(config.hydra.sweep.dir)).absolute()
        except Exception as e:  # a config without hydra.sweep.dir
            log.warning("CollectCallback: cannot read hydra.sweep.dir (%s)", e)
            return None
