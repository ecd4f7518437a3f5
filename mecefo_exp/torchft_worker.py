"""One cluster=torchft worker process (`python -m mecefo_exp.torchft_worker <run dir>`, started by
the launcher of its machine, mecefo_exp/tiers/torchft/launcher.py): it runs the trainer's loop."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path

from .config import typed_config
from .run.experiment import Experiment
from .signals import Terminated
from .tiers.torchft.network import ENV_INCARNATION, ENV_WORKER


class WithoutTraceback(logging.Formatter):
    """The console's lines: a record's traceback goes to the worker's log file only (every worker
    shares the launcher's console, where one failure would print a traceback per worker)."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            line = super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
        return line + (" (traceback in its log file)" if saved[0] or saved[1] else "")


def worker_main() -> int:
    """The run's config from its folder, who this worker is from the environment."""
    from omegaconf import OmegaConf

    run_dir = Path(sys.argv[1])
    worker = int(os.environ[ENV_WORKER])
    cfg = typed_config(OmegaConf.load(run_dir / "config.yaml"))  # written by the launcher: valid, typed again
    log_file = run_dir / "torchft" / f"worker-{worker}.log"
    fmt = f"[%(asctime)s][worker {worker}][%(name)s][%(levelname)s] - %(message)s"
    console = logging.StreamHandler()
    console.setLevel(logging.INFO if worker == 0 and os.environ.get(ENV_INCARNATION, "0") == "0" else logging.WARNING)
    file = logging.FileHandler(log_file)
    console.setFormatter(WithoutTraceback(fmt))
    file.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(level=logging.INFO, handlers=[console, file])
    for noisy in ("torchft", "torchft_quorums", "torchft_commits", "torchft_errors"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # torchft 0.2.0's process-group transport warns on every heal about its own buffer handling
    warnings.filterwarnings("ignore", module="torchft.checkpointing.pg_transport")
    try:
        Experiment(cfg, run_dir).run()
    except Terminated as e:
        return 128 + e.signum
    except SystemExit:
        raise
    except (
        BaseException
    ) as e:  # summary.json names this worker's log: the traceback goes there, one line to the console
        logging.getLogger(__name__).exception(
            "worker %d (process %d) failed: %s: %s",
            worker,
            os.getpid(),
            type(e).__name__,
            " ".join(str(e).split())[:300],
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main())
