"""torchft across processes and machines: the environment the launcher gives each worker, the
addresses a run listens on (cluster.bind; IPv4), its stores, and torchft's Manager server bound to
that address instead of every interface. Used by the launcher and by the workers' membership.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
from typing import Dict, Optional

from ...config.checks import require
from ...errors import ConfigError

#: the environment the launcher gives each worker process
ENV_WORKER, ENV_INCARNATION = "MECEFO_TORCHFT_WORKER", "MECEFO_TORCHFT_INCARNATION"
ENV_LIGHTHOUSE, ENV_STORE, ENV_STARTED = "MECEFO_TORCHFT_LIGHTHOUSE", "MECEFO_TORCHFT_STORE", "MECEFO_TORCHFT_STARTED"
#: this machine's listening address and the name other machines reach it by (cluster.bind,
#: cluster.advertise: per machine, so they come from the launcher, not from config.yaml)
ENV_BIND, ENV_ADVERTISE = "MECEFO_TORCHFT_BIND", "MECEFO_TORCHFT_ADVERTISE"


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or localhost) names this machine's loopback interface."""
    import ipaddress

    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host_port(address: str, key: str) -> tuple:
    """host:port (an IPv6 host in brackets) -> (host, port), or a ConfigError naming `key`."""
    host, sep, port = str(address).rpartition(":")
    require(
        bool(sep) and bool(host.strip("[]")) and port.isdigit() and 0 < int(port) < 65536,
        f"{key}={address!r}: give host:port (a port in 1..65535), e.g. node001:29510",
    )
    return host.strip("[]"), int(port)


def require_torchft() -> None:
    try:
        import torchft  # noqa: F401  (is it there?)
    except ImportError as e:
        raise ConfigError(
            f"cluster=torchft needs torchft (optional): pip install -c constraints.txt torchft==0.2.0 ({e})"
        ) from None


#: the interface a torchft run listens on unless cluster.bind names another
LOOPBACK = "127.0.0.1"


def host_port(host: str, port: int) -> str:
    """host:port, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_wildcard(bind: str) -> bool:
    return bind in ("0.0.0.0", "::")


def local_host(bind: str) -> str:
    """How a process of this machine reaches a server bound to `bind`."""
    return LOOPBACK if is_wildcard(bind) else bind


def connect_store(address: str, timeout_s: float):
    from torch.distributed import TCPStore

    host, port = address.rsplit(":", 1)
    return TCPStore(
        host.strip("[]"),
        int(port),
        is_master=False,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def bound_store(bind: str, timeout_s: float, port: int = 0):
    """A TCPStore server listening on `bind` only. torch's own server binds every interface,
    so it is handed a socket already bound there (`master_listen_fd`)."""
    from torch.distributed import TCPStore

    sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as e:
        sock.close()

        raise ConfigError(
            f"cannot listen on {host_port(bind, port)} (cluster.bind, cluster.coordinator): {e}"
        ) from None
    sock.listen(128)
    port = sock.getsockname()[1]
    return TCPStore(
        local_host(bind),
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
        master_listen_fd=sock.detach(),
    )


def loopback_interface() -> Optional[str]:
    """The loopback interface's name (lo on Linux, lo0 on macOS), for gloo and NCCL."""
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


def _ipv4_of(name: str) -> Optional[str]:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:  # SIOCGIFADDR (Linux): the interface's IPv4 address
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _ipv6_interfaces() -> Dict[str, str]:
    """IPv6 address -> interface (Linux: /proc/net/if_inet6)."""
    found: Dict[str, str] = {}
    try:
        with open("/proc/net/if_inet6") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        found[socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0]))] = fields[-1]
    return found


def interface_of(address: str) -> Optional[str]:
    """The name of this machine's interface that holds `address` (gloo and NCCL are given
    interfaces, not addresses), or None when none does."""
    import ipaddress

    ip = ipaddress.ip_address(address)
    if ip.is_loopback:
        return loopback_interface()
    if ip.version == 6:
        return _ipv6_interfaces().get(str(ip))
    return next((name for _, name in socket.if_nameindex() if _ipv4_of(name) == str(ip)), None)


def network_environment(bind: str) -> Dict[str, str]:
    """What a worker process needs so that gloo and NCCL listen on `bind`'s interface only
    (nothing for a wildcard: they pick as they would alone)."""
    if is_wildcard(bind):
        return {}
    name = interface_of(bind)
    if name is None and is_loopback(bind):
        return {}  # loopback under a name other than lo/lo0: gloo's default resolves to it as well
    if name is None:
        raise ConfigError(
            f"cluster.bind={bind}: no interface of this machine has this address; give one of this "
            "machine's addresses (127.0.0.1, the default, listens on loopback only)"
        )
    return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}


@contextlib.contextmanager
def manager_server_bound_to(bind: str):
    """torchft 0.2.0's Manager binds its server to every interface ("[::]:port") with no
    setting to change it; while a Manager is built, its server is bound to `bind` instead."""
    import torchft.manager as torchft_manager

    original = torchft_manager.ManagerServer

    def bound(**kwargs):
        kwargs["bind"] = host_port(bind, int(kwargs["bind"].rsplit(":", 1)[1]))
        return original(**kwargs)

    torchft_manager.ManagerServer = bound
    try:
        yield
    finally:
        torchft_manager.ManagerServer = original
