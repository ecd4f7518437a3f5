"""The collectives of a worker under torchft: gradients summed over the live quorum, a gloo group
that closes its connections after a failed collective, and the cluster a worker's loop computes on
(its own micro-batches, committed through torchft's vote)."""

from __future__ import annotations

import datetime
from typing import Any

import torch

from ..torchrun import TorchrunCluster


def sum_over_quorum(manager, tensor: torch.Tensor, group=None) -> None:
    """Sum `tensor` over the live workers in place (torchft's default would average it).

    When the sum fails (a peer died inside it), this worker's connections are closed at once
    (`group`: a `closing_gloo` group), so that a live peer waiting on this worker errors now
    rather than at the collective's timeout.
    """
    from torch.distributed import ReduceOp

    manager.allreduce(tensor, reduce_op=ReduceOp.SUM).wait()
    if manager.errored() is not None and group is not None:
        group.close_connections()


def closing_gloo(timeout: datetime.timedelta):
    """torchft's reconfigurable gloo group, able to close its connections after a failed collective.

    Why: in a ring all-reduce, a worker next to a dead peer fails at once ("connection closed by
    peer"), but its live neighbour waits for data this worker will never send. torchft keeps the
    failed group open until the next quorum reconfigures it, and the next quorum waits for that
    neighbour, so both sat out the whole collective timeout (`cluster.quorum_timeout_s`). Closing
    the failed group's connections makes the neighbour fail within the second too.
    """
    from torchft import ProcessGroupGloo

    class ClosingProcessGroupGloo(ProcessGroupGloo):
        _pg: Any  # torchft's inner process group (torchft ships no types); None once closed

        def close_connections(self) -> None:
            inner = self._pg
            self._pg = None  # the next quorum's `configure` builds a new one
            if inner is not None:
                inner.shutdown()

    return ClosingProcessGroupGloo(timeout=timeout)


def tensor_bytes(obj) -> int:
    """Bytes of every tensor in a nested state dict: what a heal moved over the wire."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0


class TorchftCluster(TorchrunCluster):
    """This worker's micro-batches; sums through torchft's allreduce; commits through its vote."""

    def __init__(self, *args, worker: int, manager, group, **kwargs):
        super().__init__(*args, rank=worker, **kwargs)
        self.manager, self.group = manager, group

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        sum_over_quorum(self.manager, tensor, self.group)

    def commit(self) -> bool:
        return self.manager.should_commit()
