"""Checkpoint-restart: the baseline every other method is measured against.

Every `interval` steps (or Young/Daly's sqrt(2 * C * MTBF) with interval=auto) the full
training state is written to disk for real. On any failure the whole job stops:
detection + restart (relaunch, rendezvous, rebuild) + loading the checkpoint, all as
stall, then the steps since the checkpoint are redone (lost work). A spare replaces the
failed worker, so training goes on with n workers and the loss curve is the failure-free
one, bit for bit; only time is lost.
"""

from .base import RollbackMethod


class CheckpointRestart(RollbackMethod):
    name = "checkpoint"
    interval_key = "interval"
