"""The servers a client is given (``tikk.client.server_list``): one address stays as it was,
a list of addresses or a DNS name is balanced (round robin, pings), and a list gRPC cannot
dial is refused naming its entry; the transport's rules hold for every server of a list, and
the CLI refuses a bad ``--server`` as bad usage."""

from __future__ import annotations

import json
import re

import pytest

from server.cli import main
from server.cli.client import failover_retries
from server.cli.options import EXIT_USAGE
from tikk.client import AsyncClient, Client, ServerList, Transport, TransportError
from tikk.client.server_list import KEEPALIVE_OPTIONS, ROUND_ROBIN_CONFIG


@pytest.mark.parametrize(
    "given", ["127.0.0.1:7070", "tikk.internal:7070", "[::1]:7070", "unix:/run/tikk.sock",
              "ipv4:127.0.0.1:7070", "localhost:7070", ""],
)  # fmt: skip
def test_one_address_is_dialled_as_given_with_nothing_added(given: str) -> None:
    servers = ServerList.parse(given)
    assert (servers.target, servers.addresses, servers.balanced) == (given, (given,), False)
    assert servers.channel_options([("grpc.x", 1)]) == [("grpc.x", 1)]


def test_a_dns_name_is_balanced_over_what_it_resolves_to() -> None:
    servers = ServerList.parse("dns:///tikk.internal:7070")
    assert servers.target == "dns:///tikk.internal:7070" and servers.balanced
    options = dict(servers.channel_options([]))
    assert json.loads(options["grpc.service_config"]) == {
        "loadBalancingConfig": [{"round_robin": {}}]
    }
    assert "grpc.default_authority" not in options  # the name's own


@pytest.mark.parametrize(
    ("given", "target", "addresses"),
    [
        ("10.0.0.1:7070,10.0.0.2:7070", "ipv4:10.0.0.1:7070,10.0.0.2:7070",
         ("10.0.0.1:7070", "10.0.0.2:7070")),
        (" 10.0.0.1:7070 , 10.0.0.2:7071", "ipv4:10.0.0.1:7070,10.0.0.2:7071",
         ("10.0.0.1:7070", "10.0.0.2:7071")),
        ("[fd00::1]:7070,[fd00::2]:7070", "ipv6:[fd00::1]:7070,[fd00::2]:7070",
         ("[fd00::1]:7070", "[fd00::2]:7070")),
        ("ipv4:127.0.0.1:1,127.0.0.1:2", "ipv4:127.0.0.1:1,127.0.0.1:2",
         ("127.0.0.1:1", "127.0.0.1:2")),
        ("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "ipv4:127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
         ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")),
    ],
)  # fmt: skip
def test_a_list_of_addresses_is_one_static_target(
    given: str, target: str, addresses: tuple[str, ...]
) -> None:
    servers = ServerList.parse(given)
    assert (servers.target, servers.addresses, servers.balanced) == (target, addresses, True)
    options = servers.channel_options([])
    assert ("grpc.service_config", ROUND_ROBIN_CONFIG) in options
    assert ("grpc.default_authority", addresses[0]) in options
    assert set(KEEPALIVE_OPTIONS) <= set(options)


def test_options_given_by_the_caller_win() -> None:
    mine = [
        ("grpc.lb_policy_name", "pick_first"),
        ("grpc.default_authority", "tikk"),
        ("grpc.keepalive_time_ms", 60_000),
    ]
    options = ServerList.parse("127.0.0.1:1,127.0.0.1:2").channel_options(mine)
    assert options[:3] == mine
    keys = [key for key, _ in options]
    assert "grpc.service_config" not in keys
    assert keys.count("grpc.default_authority") == keys.count("grpc.keepalive_time_ms") == 1


@pytest.mark.parametrize(
    ("given", "named", "why"),
    [
        ("127.0.0.1:1,,127.0.0.1:2", "entry 2 ''", "is empty"),
        ("127.0.0.1:1,", "entry 2 ''", "is empty"),
        (",127.0.0.1:1", "entry 1 ''", "is empty"),
        ("127.0.0.1:1,127.0.0.1", "entry 2 '127.0.0.1'", "has no port"),
        ("127.0.0.1:1,127.0.0.1:", "entry 2 '127.0.0.1:'", "has no port"),
        ("127.0.0.1:0,127.0.0.1:2", "entry 1 '127.0.0.1:0'", "a port is 1 to 65535"),
        ("127.0.0.1:1,127.0.0.1:65536", "entry 2 '127.0.0.1:65536'", "a port is 1 to 65535"),
        ("127.0.0.1:1,127.0.0.1:http", "entry 2 '127.0.0.1:http'", "a port is 1 to 65535"),
        ("127.0.0.1:1,127.0.0.1:\u0663", "entry 2", "a port is 1 to 65535"),
        ("127.0.0.1:1,localhost:2", "entry 2 'localhost:2'", "names a host"),
        ("tikk-a:7070,tikk-b:7070", "entry 1 'tikk-a:7070'", "dns:///NAME:PORT"),
        ("127.0.0.1:1,[::1]:2", "entry 2 '[::1]:2'", "is an IPv6 address and entry 1 an IPv4"),
        ("127.0.0.1:1,127.0.0.1:1", "entry 2 '127.0.0.1:1'", "repeats entry 1"),
        ("127.0.0.1:1,dns:///tikk:2", "entry 2 'dns:///tikk:2'", "a gRPC target of its own"),
        ("unix:/a,unix:/b", "entry 1 'unix:/a'", "a gRPC target of its own"),
        ("::1:7070,::1:7071", "entry 1 '::1:7070'", "without brackets"),
        ("127.0.0.1:1,[::1", "entry 2 '[::1'", "has no port"),
    ],
)  # fmt: skip
def test_a_list_grpc_cannot_dial_is_refused_naming_the_entry(
    given: str, named: str, why: str
) -> None:
    with pytest.raises(TransportError, match="server list entry") as refused:
        ServerList.parse(given)
    assert named in str(refused.value) and why in str(refused.value)


def test_a_written_out_static_target_keeps_its_family() -> None:
    with pytest.raises(TransportError, match="is ipv4: ipv6 given"):
        ServerList.parse("ipv4:[::1]:1,[::1]:2")


def test_an_entry_is_shown_escaped_and_bounded() -> None:
    with pytest.raises(TransportError) as refused:
        ServerList.parse("127.0.0.1:1,\x1b[31m" + "x" * 500)
    message = str(refused.value)
    assert "\x1b" not in message and len(message) < 400


def test_a_token_goes_in_clear_only_to_a_list_of_loopback_servers() -> None:
    Transport(token="t").channel("127.0.0.1:1,127.0.0.2:2").close()
    Transport(token="t").channel("[::1]:1,[::1]:2").close()
    with pytest.raises(TransportError, match=re.escape("10.0.0.2:2 is neither")):
        Transport(token="t").channel("127.0.0.1:1,10.0.0.2:2")
    with pytest.raises(TransportError, match=re.escape("tikk.internal:7070 is neither")):
        Transport(token="t").channel("dns:///tikk.internal:7070")
    Transport(token="t", tls=True, server_name="tikk").channel("127.0.0.1:1,10.0.0.2:2").close()


def test_tls_to_a_list_of_hosts_needs_the_name_their_certificates_share() -> None:
    with pytest.raises(TransportError, match="--tls-server-name"):
        Transport(tls=True).channel("10.0.0.1:7070,10.0.0.2:7070")
    Transport(tls=True, server_name="tikk.internal").channel("10.0.0.1:1,10.0.0.2:1").close()
    Transport(tls=True).channel("10.0.0.1:7070,10.0.0.1:7071").close()  # one host


async def test_the_clients_refuse_a_bad_list_before_any_call() -> None:
    with pytest.raises(TransportError, match="entry 2"):
        Client("127.0.0.1:1,,127.0.0.1:2")
    with pytest.raises(TransportError, match="entry 2"):
        AsyncClient("127.0.0.1:1,localhost:2")
    with Client("127.0.0.1:1,127.0.0.1:2") as client:
        assert "127.0.0.1:1,127.0.0.1:2" in repr(client)


def test_the_cli_repeats_safe_calls_only_to_move_past_a_dead_server() -> None:
    assert failover_retries("127.0.0.1:7070") is None  # one server: every call sent once
    three = failover_retries("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
    assert three is not None and (three.attempts, three.max_backoff_s) == (3, 0.0)
    dns = failover_retries("dns:///tikk.internal:7070")
    assert dns is not None and dns.attempts == 3


@pytest.mark.parametrize(
    "argv",
    [["task", "get", "t-1"], ["task", "import", "-"],
     ["worker", "tests.e2e.worker_app:worker"]],
)  # fmt: skip
def test_a_bad_server_list_is_a_usage_error_naming_the_entry(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--server", "127.0.0.1:7070,127.0.0.1:x"]) == EXIT_USAGE
    assert "entry 2 '127.0.0.1:x'" in capsys.readouterr().err
