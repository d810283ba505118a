"""An address in use is seen whoever listens there, a group's members (SO_REUSEPORT) too."""

from __future__ import annotations

import socket

import pytest

from server.listen_address import address_in_use, refuse_if_taken
from tikk.errors import FailedPrecondition


@pytest.mark.parametrize("reuse_port", [False, True], ids=["alone", "group"])
def test_an_address_someone_listens_on_is_in_use(reuse_port: bool) -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(reuse_port))
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        assert address_in_use(address)
        with pytest.raises(FailedPrecondition, match=f"cannot listen on {address}: address in"):
            refuse_if_taken(address)
    assert not address_in_use(address)


def test_any_port_is_left_to_the_bind() -> None:
    assert not address_in_use("127.0.0.1:0")
