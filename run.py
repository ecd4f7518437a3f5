"""Entry point: compose the Hydra config, check it, train, leave the run record.

    python run.py                                   # tiny LLaMA, 8 workers, mecefo, failure=high
    python run.py method=bamboo failure=medium model=llama_60m
    python run.py -m method=checkpoint,mecefo failure=none,high
"""

import logging
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from mecefo_exp.config import ConfigError, register_configs, validate
from mecefo_exp.metrics import write_json_atomic

register_configs()
log = logging.getLogger("run")


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig):
    from pathlib import Path

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        validate(cfg)
    except ConfigError as e:
        # One line, before any compute; the folder says it did not run.
        write_json_atomic(run_dir / "summary.json", {"status": "failed", "error": f"config: {e}"})
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    if cfg.data.name == "local" or cfg.data.path:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from mecefo_exp.trainer import Experiment  # torch and transformers load only for a valid config

    summary = Experiment(cfg, run_dir).run()
    return summary["final_val_ppl"]


if __name__ == "__main__":
    main()
