/**
 * The servers an address names, as the Python client and the CLI read them
 * (`tikk/client/server_list.py`):
 *
 * ```
 * 127.0.0.1:7070                  one server, dialled exactly as gRPC dials any target
 * 10.0.0.1:7070,10.0.0.2:7070     several: gRPC's ipv4: target, round_robin
 * [fd00::1]:7070,[fd00::2]:7070   the same over IPv6 (ipv6:)
 * dns:///tikk.internal:7070       every address the name resolves to, round_robin
 * ```
 *
 * With several servers each call goes to the next server whose connection is ready, so calls
 * spread and a server that is down is skipped; connections that carry calls are pinged, so a
 * server that hangs is left too; and a call that is safe to repeat (`TikkClient` says which)
 * and ends UNAVAILABLE, its server lost under it, is sent again, to another server. A list
 * holds IP addresses of one family (what gRPC's static targets express); anything else in a
 * list is refused naming the entry.
 */
import { isIP } from "node:net";
import type * as grpc from "@grpc/grpc-js";

/** What a client dials: the gRPC target, each server's `host:port` (the target itself for
 * one address or a DNS name), and whether calls are balanced over several servers. */
export interface Servers {
  target: string;
  addresses: string[];
  balanced: boolean;
}

const ROUND_ROBIN = JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] });
// Pings of a connection that carries calls: a server that does not answer one within the
// timeout is left. tikk servers permit one every 4 s on a quiet call.
const PING_INTERVAL_MS = 5_000;
const PING_TIMEOUT_MS = 5_000;
const TARGET_SCHEMES = new Set(["dns", "unix", "unix-abstract", "ipv4", "ipv6"]);

/** The servers `given` names; a `TypeError` naming the entry of a list gRPC cannot dial. */
export function parseServers(given: string): Servers {
  if (!given.includes(",")) return { target: given, addresses: [given], balanced: given.startsWith("dns:") };
  const entries = given.split(",").map((entry) => entry.trim());
  const families = entries.map((entry, i) => {
    const family = entryFamily(entry, i + 1);
    const first = entries.indexOf(entry);
    if (first < i) throw refused(entry, i + 1, `repeats entry ${first + 1}: name each server once`);
    return family;
  });
  const mixed = families.findIndex((family) => family !== families[0]);
  if (mixed >= 0) {
    throw refused(entries[mixed], mixed + 1,
      `is an ${families[mixed]} address and entry 1 an ${families[0]} one: gRPC balances over addresses of one family only; give a DNS name (dns:///NAME:PORT) that resolves to them all`);
  }
  const scheme = families[0] === "IPv4" ? "ipv4" : "ipv6";
  return { target: `${scheme}:${entries.join(",")}`, addresses: entries, balanced: true };
}

/** "IPv4" or "IPv6": the family of the list's entry number `n`, or why it cannot be in one. */
function entryFamily(entry: string, n: number): string {
  if (!entry) throw refused(entry, n, "is empty: entries are host:port, separated by commas");
  if (entry.includes(":/") || TARGET_SCHEMES.has(entry.split(":")[0])) {
    throw refused(entry, n, "is a gRPC target of its own: a list holds host:port entries only (a dns:/// name stands alone and resolves to every server itself)");
  }
  const bracketed = entry.match(/^\[([^\]]*)\](?::(.*))?$/);
  const [host, port] = bracketed ? [bracketed[1], bracketed[2]] : splitLast(entry);
  if (!bracketed && host.includes(":") && isIP(host) === 6) {
    throw refused(entry, n, "is an IPv6 address without brackets: give [address]:port");
  }
  if (port === undefined || port === "") throw refused(entry, n, "has no port: give host:port");
  if (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    throw refused(entry, n, `has port ${JSON.stringify(port.slice(0, 100))}: a port is 1 to 65535`);
  }
  const version = isIP(host);
  if (version === 0) {
    throw refused(entry, n, "names a host: a list holds IP addresses (gRPC balances over names only through DNS): give each server's address, or one dns:///NAME:PORT that resolves to them all");
  }
  return version === 4 ? "IPv4" : "IPv6";
}

function splitLast(entry: string): [string, string | undefined] {
  const colon = entry.lastIndexOf(":");
  return colon < 0 ? [entry, undefined] : [entry.slice(0, colon), entry.slice(colon + 1)];
}

function refused(entry: string, n: number, why: string): TypeError {
  return new TypeError(`server list entry ${n} ${JSON.stringify(entry.slice(0, 100))} ${why}`);
}

/** The channel options several servers need (none for one): round_robin, pings, and a list's
 * authority, the first server's (unless TLS checks the servers for `serverName`). */
export function serverOptions(servers: Servers, serverName: string): grpc.ChannelOptions {
  if (!servers.balanced) return {};
  const options: grpc.ChannelOptions = {
    "grpc.service_config": ROUND_ROBIN,
    "grpc.keepalive_time_ms": PING_INTERVAL_MS,
    "grpc.keepalive_timeout_ms": PING_TIMEOUT_MS,
  };
  if (servers.addresses.length > 1 && !serverName) options["grpc.default_authority"] = servers.addresses[0];
  return options;
}

/** How many hosts the servers are on. */
export function hostCount(servers: Servers): number {
  return new Set(servers.addresses.map((address) => address.replace(/:\d+$/, "").replace(/^\[|\]$/g, ""))).size;
}
