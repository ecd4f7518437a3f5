"""cluster=torchft's own settings, checked before any compute (imports no tensor library)."""

from __future__ import annotations

from typing import Any

from ...config.checks import measures_this_machine, require
from ...errors import ConfigError
from .network import is_loopback, split_host_port


def check_config(cfg: Any) -> None:
    """cluster=torchft: every process runs the same loop, so the clock must be the same
    everywhere (no machine measurement), and one process at a time writes the record."""
    c, h = cfg.cluster, cfg.hardware
    require(c.n_workers >= 2, f"cluster.n_workers={c.n_workers} with cluster=torchft: need >= 2 workers (processes)")
    require(cfg.trainer.numerics, "trainer.numerics=false runs in one process: use cluster=local")
    require(
        not cfg.resume,
        "resume=true with cluster=torchft: not supported (a torchft run heals workers from live "
        "peers; after the whole job dies, start it again)",
    )
    require(
        not measures_this_machine(c, h),
        f"hardware={h.name} with cluster=torchft: each process would measure its own clock and the "
        "workers' plans would drift apart; use a FLOP preset (hardware=cpu_ref, a100_32, h100_8) or "
        "cluster.profile=<file>",
    )
    require(
        cfg.logger.name == "none",
        f"logger={cfg.logger.name} with cluster=torchft: not supported (the process that "
        "writes the record can change during the run); metrics.jsonl has every row",
    )
    require(c.backend in ("auto", "gloo", "nccl"), f"cluster.backend={c.backend!r}: allowed: auto, gloo, nccl")
    require(
        c.lighthouse is None or c.lighthouse.startswith(("http://", "https://")),
        f"cluster.lighthouse={c.lighthouse!r}: give the lighthouse's address as http://host:port (or leave it "
        "unset and the run starts one on 127.0.0.1)",
    )
    for key in ("heartbeat_timeout_ms", "join_timeout_ms", "quorum_timeout_s", "restart_timeout_s"):
        require(c[key] > 0, f"cluster.{key}={c[key]}: must be > 0")
    _check_machines(c)
    ckpt = cfg.method.get("backend", "torch")
    require(
        ckpt == "torch",
        f"method.backend={ckpt} with cluster=torchft: only torch (torch.distributed.checkpoint "
        "needs one process group over all workers, which torchft replaces with its quorum)",
    )


def _check_machines(c: Any) -> None:
    """cluster=torchft across machines: who this launcher is, where machine 0 is, what listens where."""
    import ipaddress

    require(
        c.machine_rank < c.machines,
        f"cluster.machine_rank={c.machine_rank} with cluster.machines={c.machines}: must be in 0..{c.machines - 1}",
    )
    require(
        c.n_workers % c.machines == 0 and c.n_workers // c.machines >= 1,
        f"cluster.n_workers={c.n_workers} over cluster.machines={c.machines}: every machine runs the same number "
        f"of workers, so n_workers must be a multiple of machines",
    )
    try:
        bind = ipaddress.ip_address(c.bind)
    except ValueError:
        raise ConfigError(
            f"cluster.bind={c.bind!r}: give an address of this machine (127.0.0.1, the default, listens "
            "on loopback only; an interface's address, e.g. 10.0.0.5, or 0.0.0.0 for every interface)"
        ) from None
    # torchft 0.2.0 builds its Manager's URI as http://host:port, which an IPv6 host breaks in every worker
    ipv6 = (
        "an IPv6 address, which torchft 0.2.0 cannot take (its Manager's URI is http://host:port); give an "
        "IPv4 address or a host name"
    )
    require(bind.version == 4, f"cluster.bind={c.bind!r}: {ipv6}")
    if c.coordinator is not None:
        host, _ = split_host_port(c.coordinator, "cluster.coordinator")
        require(":" not in host, f"cluster.coordinator={c.coordinator!r}: {ipv6}")
    require(c.advertise is None or ":" not in str(c.advertise), f"cluster.advertise={c.advertise!r}: {ipv6}")
    require(
        c.machines == 1 or c.coordinator is not None,
        f"cluster.machines={c.machines}: give cluster.coordinator=host:port, where machine 0's launcher serves the "
        "run's coordination store (every launcher and worker connects to it), e.g. cluster.coordinator=node001:29510",
    )
    if bind.is_loopback:
        # the default: nothing is reachable from another machine, so every name the run hands out must be loopback too
        require(
            c.coordinator is None or is_loopback(host),
            f"cluster.coordinator={c.coordinator} with cluster.bind={c.bind}: machine 0 listens on loopback only, "
            "so no other machine could reach it; set cluster.bind to this machine's address on the network the "
            "machines share (an explicit choice: that interface then serves the run's stores and model state)",
        )
        require(
            c.advertise is None or is_loopback(c.advertise),
            f"cluster.advertise={c.advertise} with cluster.bind={c.bind}: the servers listen on loopback only, "
            "so other machines could not reach that name; set cluster.bind to the address it resolves to",
        )
    elif bind.is_unspecified:
        require(
            c.advertise is not None,
            f"cluster.bind={c.bind} listens on every interface: also give cluster.advertise=<the name or address "
            "the other machines reach this one by>",
        )
