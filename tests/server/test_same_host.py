"""The shared transport's same-host check: which gRPC peers and host identities count as this machine."""

import pytest

from rollout.server.same_host import NotSameHostError, check_same_host, peer_is_local
from rollout.weights.shared import host_boot_id


@pytest.mark.parametrize(
    "peer",
    [
        "ipv4:127.0.0.1:5000",
        "ipv4:127.0.1.1:7",
        "ipv6:[::1]:5000",
        "ipv6:[::ffff:127.0.0.1]:9",
        "unix:/tmp/s",
    ],
)
def test_loopback_and_unix_peers_are_this_machine(peer: str) -> None:
    assert peer_is_local(peer)


@pytest.mark.parametrize("peer", ["ipv4:203.0.113.9:5000", "ipv6:[2001:db8::1]:5000", "ipv4:", "garbage"])
def test_other_addresses_are_another_machine(peer: str) -> None:
    assert not peer_is_local(peer)


def test_a_remote_peer_is_refused_with_a_message_naming_it() -> None:
    with pytest.raises(NotSameHostError, match=r"203\.0\.113\.9.*transport='grpc'"):
        check_same_host("ipv4:203.0.113.9:5000", host_boot_id(), "trainer-3")


@pytest.mark.skipif(not host_boot_id(), reason="no boot id on this system")
def test_a_loopback_peer_with_another_boot_id_is_refused() -> None:
    with pytest.raises(NotSameHostError, match="boot id"):
        check_same_host("ipv4:127.0.0.1:5000", "another-boot-id", "trainer-3")
    check_same_host("ipv4:127.0.0.1:5000", host_boot_id(), "here")  # this machine passes
