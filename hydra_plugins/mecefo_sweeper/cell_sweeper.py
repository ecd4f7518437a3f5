"""A Hydra sweeper for designs that are not one cartesian product.

Hydra's basic sweeper runs the product of `hydra.sweeper.params`. A study such as the
paper's Table 2 is a product of *unions*: every model x (every method at every failure
level  U  three methods at the high level under a grid of failure readings). `CellSweeper`
takes `groups`: a list of groups, each a list of cells; a cell is a list of overrides in
Hydra's own sweep syntax (`method=bamboo,mecefo`), expanded as a product. The jobs are the
product over groups of the union over each group's cells (duplicates dropped, order kept),
times `params` and the command line, as the basic sweeper would run them.

    hydra:
      sweeper:
        _target_: hydra_plugins.mecefo_sweeper.cell_sweeper.CellSweeper
        groups:
          - [[model=llama_350m, trainer.max_steps=6000], [model=llama_1b, trainer.max_steps=20000]]
          - [["method=mecefo,bamboo", "failure=none,high"], [method=oobleck, failure=high]]
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any, List, Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from mecefo_exp.cli import sweeps

log = logging.getLogger(__name__)


def representatives(jobs: Sequence[Sequence[str]]) -> List[Sequence[str]]:
    """The jobs that bring an override (key=value) no earlier job had: composing these checks
    every key and value of the sweep before any job runs, as Hydra's basic sweeper does by
    composing every job (318 jobs of paper_table2: 53 s of composition before the first job
    started, against about 20 compositions here). A combination that only fails together is
    found by its job, whose record then says `failed` and why."""
    seen, out = set(), []
    for job in jobs:
        new = set(job) - seen
        if new:
            seen |= new
            out.append(job)
    return out


class CellSweeper(BasicSweeper):
    def __init__(
        self,
        max_batch_size: Optional[int] = None,
        params: Optional[dict] = None,
        groups: Optional[List[List[List[str]]]] = None,
    ):
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.groups = [[list(cell) for cell in group] for group in (groups or [])]

    def expand(self, parser, overrides: Sequence[str]) -> List[List[str]]:
        """The jobs of one cell: its sweep syntax expanded as a product."""
        batches = BasicSweeper.split_arguments(parser.parse_overrides(list(overrides)), None)
        return [list(job) for batch in batches for job in batch]

    def sweep(self, arguments: List[str]) -> Any:
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        base = self.expand(parser, self._parse_config() + list(arguments))
        per_group = []
        for group in self.groups:
            seen, union = set(), []
            for cell in group:
                for job in self.expand(parser, cell):
                    if tuple(job) not in seen:
                        seen.add(tuple(job))
                        union.append(job)
            per_group.append(union)
        jobs = [b + [o for part in combo for o in part] for b in base for combo in itertools.product(*per_group)]
        size = self.max_batch_size or len(jobs)
        self.overrides = [jobs[i : i + size] for i in range(0, len(jobs), size)]
        log.info("CellSweeper: %d jobs", len(jobs))
        sweeps.plan(jobs)  # a stopped sweep lists the jobs it never started
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns, first = [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(representatives(batch))
            results = self.launcher.launch(batch, initial_job_idx=first)
            for r in results:
                _ = r.return_value  # raise if a job failed
            first += len(batch)
            returns.append(results)
        return returns
