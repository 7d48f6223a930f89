"""Ports named on the command line: a valid number (argparse refuses others), free before the model
loads (a taken port found after a minute of loading, as a traceback, helps nobody)."""

from __future__ import annotations

import argparse
import errno
import socket

from rollout.commands.usage import UsageError


def port_number(text: str) -> int:
    """argparse type: an integer in 0..65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0-65535; 0 picks a free one)")
    return port


def check_bindable(host: str, port: int, flag: str) -> None:
    """UsageError unless a server could listen on `host`:`port` now; port 0 is always free."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    causes = [_bind_error(family, address) for family, _, _, _, address in addresses]
    if any(c is not None and c.errno == errno.EADDRINUSE for c in causes):
        raise UsageError(
            f"{flag} {port}: already in use on {host} (another server?); pick another port, or 0 for a free one"
        )
    if all(c is not None for c in causes):
        raise UsageError(f"--host {host}: cannot listen there ({causes[0].strerror})")


def _bind_error(family: int, address: tuple) -> OSError | None:
    """What binding `address` raises now, as the server would bind it (SO_REUSEADDR on), or None."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc
    return None
