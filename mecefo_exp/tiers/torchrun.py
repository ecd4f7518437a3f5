"""One worker per torchrun rank, real collectives (gloo on CPU, NCCL on GPU).

Every rank runs the same deterministic loop: the same trace (drawn from the seed), the
same method decisions, the same plan. A rank computes only the micro-batches the plan
gives *its* worker; a failed worker's rank stays up and computes nothing (masked per
iteration, as the paper simulated failures). The gradient sums are all-reduced and each
parameter is divided by its contributor count, which every rank knows from the plan, so
the math is the simulated tier's (up to the order of float additions).

Only rank 0 writes the run folder. `agree_run_dir` makes every rank use rank 0's folder,
also across torchrun restarts (`--max-restarts`), through a small file keyed by torchrun's
run id. Across machines (`--nnodes=N`, c10d rendezvous) the run folder, that file
(`runs/.torchrun/`) and the caches (`.cache/` or `$MECEFO_CACHE`) must be on a file
system every machine sees; a later round (after a failure, on the machines that are there)
resumes the run from its newest checkpoint.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

from ..errors import AnticipatedEnd, ConfigError
from ..numerics.executor import LocalCluster, Loss
from ..plan import Plan, Sample
from .local import LocalTier
from .torchrun_launch import launched_by_torchrun

#: the torchrun round this process belongs to (0: the first start), set by init_distributed
ROUND_ENV = "MECEFO_TORCHRUN_ROUND"


def init_distributed(backend: str = "auto") -> None:
    """Join the process group torchrun describes in the environment (idempotent)."""
    if dist.is_initialized():
        return
    if backend == "auto":
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "nccl" in backend and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=120)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=(rank == 0 and not agent_store),
        timeout=timeout,
    )
    # An agent's TORCHELASTIC_RESTART_COUNT differs between machines (a replaced machine's agent
    # starts at 0), so the ranks agree on the round (0: the first start) themselves.
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if agent_store:
        # the rendezvous store outlives a round: every rank counts its start in it, so the ranks
        # of one round agree without talking to each other, and the round's prefix keeps a
        # restarted rank from reading the dead round's gloo addresses
        round_ = (store.add("mecefo/rank_starts", 1) - 1) // world
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore(f"mecefo/round{round_}", store),
            rank=rank,
            world_size=world,
            timeout=timeout,
        )
    else:  # rank 0 serves a fresh store every round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, static rendezvous)
        dist.init_process_group(
            backend=backend, store=dist.PrefixStore("mecefo", store), rank=rank, world_size=world, timeout=timeout
        )
        most = torch.tensor([restarts], dtype=torch.int64)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        round_ = int(most.item())
    os.environ[ROUND_ENV] = str(round_)  # a later round resumes the run (cli/, config/hydra_glue.py)


#: a machine that dies whole takes an instant to close its sockets: its store may still accept a
#: connection just after its ranks' deaths failed this rank's collective
WRITER_CHECK_AFTER_S = 2.0


class WriterGone(AnticipatedEnd):
    """Rank 0, which writes the run record, is gone, and with it this round of the job."""


def writer_gone() -> Optional[WriterGone]:
    """After this rank failed: whether rank 0 is gone too, so that nobody would close the record.
    The ranks' store (MASTER_ADDR) is torchrun's rendezvous store when the ranks share it (c10d's
    default), else rank 0's own: unreachable, the rendezvous host or rank 0 is gone."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    time.sleep(WRITER_CHECK_AFTER_S)
    try:
        socket.create_connection((host, port), timeout=10).close()
        return None
    except OSError as e:
        why = e.strerror or e
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return WriterGone(
            f"torchrun's rendezvous store at {host}:{port} is gone ({why}): the machine that hosted it "
            "died or was stopped, and no round of this job can form again"
        )
    return WriterGone(
        f"rank 0, which writes the run record, is gone (its store at {host}:{port}: {why}): this round "
        "of the job ended; a later round, if torchrun's agents form one, resumes the run"
    )


def agree_run_dir(proposed: str, root: Path) -> str:
    """Rank 0's run folder for every rank, the same on a restart of the same torchrun job."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    marker = root / ".torchrun" / f"{run_id}.dir"
    chosen = [proposed]
    if dist.get_rank() == 0:
        if run_id != "none" and marker.exists() and int(os.environ.get(ROUND_ENV, 0)) > 0:
            chosen = [marker.read_text().strip()]
        elif run_id != "none":
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(proposed)
    dist.broadcast_object_list(chosen, src=0)
    return chosen[0]


class TorchrunCluster(LocalCluster):
    def __init__(self, *args, rank: Optional[int] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.rank = dist.get_rank() if rank is None else rank  # torchft passes its worker id

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor)

    def my_share(self, plan: Plan) -> Dict[str, List[Sample]]:
        mine = Plan(plan.step, {self.rank: plan.work.get(self.rank, [])})
        return mine.by_mode()

    def reduce(self, losses: Dict[Sample, Loss], tokens: int):
        """Sum every rank's gradient contributions (zeros where a rank has none) and losses."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params.values()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.all_reduce_sum(flat)
        offset = 0
        for p in self.params.values():
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)  # views into this step's fresh buffer: no copy
            offset += n
        stats = torch.tensor(
            [float(sum(losses.values())), float(len(losses)), float(tokens)], dtype=torch.float64, device=flat.device
        )
        self.all_reduce_sum(stats)
        return stats[0].item(), int(stats[1].item()), int(stats[2].item())


def broadcast_object(obj: Optional[object]) -> object:
    """Rank 0's object on every rank (a no-op outside torchrun)."""
    if not (dist.is_available() and dist.is_initialized()):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class TorchrunTier(LocalTier):
    """One worker per torchrun rank; gradients all-reduced (TorchrunCluster above)."""

    def start(self, device: Optional[torch.device]) -> Optional[torch.device]:
        if not launched_by_torchrun():
            raise ConfigError(
                "cluster=torchrun needs torchrun: torchrun --nproc-per-node=N run.py cluster=torchrun ..."
            )
        init_distributed(self._backend)
        self.rank, world = dist.get_rank(), dist.get_world_size()
        if world != self.n_workers:
            raise ConfigError(
                f"cluster.n_workers={self.n_workers} but torchrun started {world} ranks; set cluster.n_workers={world}"
            )
        if device is not None and device.type == "cuda":  # None: numerics off
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return device

    def __init__(self, cfg, run_dir: Path):
        super().__init__(cfg, run_dir)
        self._backend = cfg.cluster.backend

    def cluster_class(self):
        return TorchrunCluster

    def record_left_behind(self) -> Optional[BaseException]:
        return writer_gone()

    @property
    def closes_a_left_record(self) -> bool:
        return os.environ.get("LOCAL_RANK", "0") == "0"  # the first rank of each machine left

    def share_profile(self, timing) -> None:
        if timing.info["compute"] == "measured":
            timing.profile = broadcast_object(timing.profile)  # rank 0 measured it

    def barrier(self) -> None:
        dist.barrier()
