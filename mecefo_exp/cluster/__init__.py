"""Executors of a step's plan: `local` (n simulated workers in one process) and `torchrun`."""

import os


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process (read from the environment, without importing torch)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ
