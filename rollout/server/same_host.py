"""Same-host checks for the shared transport: its handles name this machine's memory, so a call from elsewhere is refused.

Two checks, both must pass: the gRPC peer is this machine (loopback, a Unix socket, or an address this
host resolves its own name to), and the trainer's boot id equals the server's (two machines never share one).
"""

from __future__ import annotations

import socket

from rollout.weights.shared import host_boot_id


class NotSameHostError(RuntimeError):
    """A shared update from another machine: its handles cannot name this machine's memory."""


def check_same_host(peer: str, boot_id: str, hostname: str) -> None:
    """Raises NotSameHostError naming the peer unless the caller runs on this machine."""
    if not peer_is_local(peer):
        raise NotSameHostError(
            f"the shared transport needs the trainer on this machine; the call came from {peer} "
            f"({hostname or 'unnamed host'}): use transport='grpc' or 'distributed' across machines"
        )
    own = host_boot_id()
    if own and boot_id != own:
        raise NotSameHostError(
            f"the shared transport needs the trainer on this machine; the caller's boot id "
            f"{boot_id or '(none)'} ({hostname or 'unnamed host'}) is not this server's {own}"
        )


def peer_is_local(peer: str) -> bool:
    """Whether a gRPC peer string ("ipv4:127.0.0.1:5123", "ipv6:[::1]:5123", "unix:...") is this machine."""
    if peer.startswith(("unix:", "unix-abstract:")):
        return True
    host = _peer_host(peer)
    if host is None:
        return False
    host = host.removeprefix("::ffff:")
    return host.startswith("127.") or host == "::1" or host in _local_addresses()


def _peer_host(peer: str) -> str | None:
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return None
    host = rest.rpartition(":")[0].strip("[]")
    return host or None


def _local_addresses() -> set[str]:
    """The addresses this host resolves its own name to (a trainer dialling the host's own address)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}
