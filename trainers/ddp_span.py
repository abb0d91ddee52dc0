"""One part of a data-parallel trial that spans several machines: where its ranks stand, and its rendezvous.

A trial of ``data_parallel = k`` ranks wider than one worker runs as parts, one per worker
(the cluster decides the parts; see :mod:`cluster.span`). Part ``i`` runs ``local`` ranks,
global ranks ``first_rank .. first_rank + local - 1`` of ``world_size``. The part holding
rank 0 hosts the ``torch.distributed`` TCP store on its own host address
(:func:`host_store`), which is ``MASTER_ADDR``/``MASTER_PORT`` for every rank of every part.
Ranks talk over the interface that carries ``host`` (``GLOO_SOCKET_IFNAME`` and
``NCCL_SOCKET_IFNAME``, :func:`interface_of`): NCCL on CUDA (one device per local rank),
gloo on the CPU, as on one machine.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import datetime
import fcntl
import socket
import struct
import sys

import torch.distributed as dist

__all__ = ["RankSpan", "host_store", "interface_of"]

SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


@dataclasses.dataclass(frozen=True)
class RankSpan:
    """Where this part's ranks stand in a trial spanning several hosts."""

    world_size: int
    "Ranks of the whole trial (``config.data_parallel``)."
    first_rank: int
    "The global rank of this part's first local rank."
    local: int
    "Ranks this part runs on this host."
    master_addr: str
    "The host of rank 0's part, where the rendezvous store listens."
    master_port: int
    "The store's port."
    host: str = ""
    "This host's address on the network the ranks share (picks the socket interface); '' lets torch choose."

    def __post_init__(self) -> None:
        if not 1 <= self.local <= self.world_size:
            raise ValueError(f"local={self.local}: a part runs from 1 to world_size={self.world_size} ranks")
        if not 0 <= self.first_rank <= self.world_size - self.local:
            raise ValueError(
                f"first_rank={self.first_rank}: must leave room for {self.local} ranks of {self.world_size}"
            )
        if not 0 < self.master_port < 65536:
            raise ValueError(f"master_port={self.master_port}: must be a TCP port (1..65535)")

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.local)

    @property
    def holds_rank0(self) -> bool:
        return self.first_rank == 0


def host_store(
    host: str, world_size: int, timeout: datetime.timedelta = datetime.timedelta(minutes=10)
) -> dist.TCPStore:
    """The rendezvous store (server side) on a free port of ``host`` only (see :func:`trainers.ddp.loopback_store`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(128)
        store = dist.TCPStore(
            host,
            sock.getsockname()[1],
            world_size,
            is_master=True,
            wait_for_workers=False,
            timeout=timeout,
            master_listen_fd=sock.fileno(),
        )
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns it now
    return store


def interface_of(address: str) -> str:
    """The network interface holding IPv4 ``address`` ('' when none does, or off Linux)."""
    if sys.platform != "linux" or not address:
        return ""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _index, name in socket.if_nameindex():
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            with contextlib.suppress(OSError):
                fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request, True)
                if socket.inet_ntoa(request.tobytes()[20:24]) == address:
                    return name
    return ""
