"""Executors of a step's plan: `local` (n simulated workers in one process) and `torchrun`."""
