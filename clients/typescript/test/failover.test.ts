/** Several servers: the addresses a client reads (no server needed), and failover between two
 * real servers on one data directory (TIKK_FAILOVER_ADDR names both, TIKK_FAILOVER_PIDS their
 * processes, which the test pauses and kills; tests/e2e/test_ts_client.py starts them). */
import assert from "node:assert/strict";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";

import { TaskState, TikkClient, TikkError, parseServers } from "../src/index";

const FAILOVER_ADDR = process.env.TIKK_FAILOVER_ADDR ?? "";
const PIDS = (process.env.TIKK_FAILOVER_PIDS ?? "").split(",").filter(Boolean).map(Number);
const NO_SERVERS = FAILOVER_ADDR && PIDS.length === 2 ? false : "TIKK_FAILOVER_ADDR and TIKK_FAILOVER_PIDS are not set";
const HOUR = 3_600_000;
/** Calls of each kind sent while one of two servers is paused: round robin gives it every other one. */
const IN_FLIGHT = 8;

test("one address is dialled as given, a list and a DNS name are balanced", () => {
  for (const one of ["127.0.0.1:7070", "tikk.internal:7070", "[::1]:7070", "unix:/run/tikk.sock"]) {
    assert.deepEqual(parseServers(one), { target: one, addresses: [one], balanced: false });
  }
  assert.deepEqual(parseServers(" 10.0.0.1:7070 , 10.0.0.2:7071"), {
    target: "ipv4:10.0.0.1:7070,10.0.0.2:7071", addresses: ["10.0.0.1:7070", "10.0.0.2:7071"], balanced: true,
  });
  assert.equal(parseServers("[fd00::1]:7070,[fd00::2]:7070").target, "ipv6:[fd00::1]:7070,[fd00::2]:7070");
  assert.equal(parseServers("dns:///tikk.internal:7070").balanced, true);
});

test("a list gRPC cannot dial is refused naming the entry", () => {
  const refusals: [string, string][] = [
    ["127.0.0.1:1,,127.0.0.1:2", 'entry 2 "" is empty'],
    ["127.0.0.1:1,127.0.0.1", 'entry 2 "127.0.0.1" has no port'],
    ["127.0.0.1:0,127.0.0.1:2", 'entry 1 "127.0.0.1:0" has port "0"'],
    ["127.0.0.1:1,127.0.0.1:http", 'entry 2 "127.0.0.1:http" has port'],
    ["127.0.0.1:1,localhost:2", 'entry 2 "localhost:2" names a host'],
    ["127.0.0.1:1,[::1]:2", 'entry 2 "[::1]:2" is an IPv6 address and entry 1 an IPv4 one'],
    ["127.0.0.1:1,127.0.0.1:1", 'entry 2 "127.0.0.1:1" repeats entry 1'],
    ["127.0.0.1:1,dns:///tikk:2", 'entry 2 "dns:///tikk:2" is a gRPC target of its own'],
    ["::1:7070,::1:7071", 'entry 1 "::1:7070" is an IPv6 address without brackets'],
  ];
  for (const [given, why] of refusals) {
    assert.throws(() => new TikkClient(given), (err: unknown) => err instanceof TypeError && err.message.includes(`server list ${why}`), given);
  }
});

test("a token goes in clear only to loopback servers, TLS to several hosts needs their name", () => {
  new TikkClient("127.0.0.1:1,127.0.0.2:2", { token: "t" }).close();
  assert.throws(() => new TikkClient("127.0.0.1:1,10.0.0.2:2", { token: "t" }), /10\.0\.0\.2:2 is neither/);
  assert.throws(() => new TikkClient("10.0.0.1:1,10.0.0.2:1", { tls: { ca: "" } }), /tls\.serverName/);
  new TikkClient("10.0.0.1:1,10.0.0.1:2", { tls: { ca: "" } }).close();
});

test("calls on a killed server move to the other only when safe", { skip: NO_SERVERS }, async () => {
  const tikk = new TikkClient(FAILOVER_ADDR, { namespace: "ts-failover" });
  try {
    for (let i = 0; i < 6; i++) await assert.rejects(tikk.getTask("warm-up"), { code: grpc.status.NOT_FOUND });
    for (let i = 0; i < IN_FLIGHT; i++) await tikk.createTask(later(`to-cancel-${i}`));
    process.kill(PIDS[1], "SIGSTOP");
    const calls = new Map<string, Promise<unknown>>();
    for (let i = 0; i < IN_FLIGHT; i++) {
      const round: [string, () => Promise<unknown>][] = [
        [`with-id-${i}`, () => tikk.createTask(later(`with-id-${i}`))],
        [`without-id-${i}`, () => tikk.createTask(later())],
        [`cancel-${i}`, () => tikk.cancelTask(`to-cancel-${i}`)],
        [`get-${i}`, () => tikk.getTask(`to-cancel-${i}`)],
      ];
      // Round robin alternates strictly: every other round in another order, so that each
      // kind of call goes to both servers.
      if (i % 2) [round[0], round[1], round[2], round[3]] = [round[1], round[0], round[3], round[2]];
      for (const [name, call] of round) calls.set(name, call());
    }
    await new Promise((r) => setTimeout(r, 1_000)); // the calls wait on the paused server meanwhile
    process.kill(PIDS[1], "SIGKILL");
    const killed = Date.now();
    const settled = await Promise.allSettled(calls.values());
    console.log(`all calls settled ${Date.now() - killed} ms after the kill -9`);
    let lost = 0;
    [...calls.keys()].forEach((name, i) => {
      const outcome = settled[i];
      if (outcome.status === "fulfilled") return;
      const err = outcome.reason;
      assert.ok(name.startsWith("without-id") && err instanceof TikkError && err.code === grpc.status.UNAVAILABLE, `${name}: ${err}`);
      lost++;
    });
    assert.ok(lost > 0, "no create without an id was on the killed server: nothing shows it is not repeated");
    const listed = await tikk.listTasks({ queue: "ts-later", pageSize: 1000 });
    assert.equal(listed.items.length, 3 * IN_FLIGHT - lost);
    const cancelled = listed.items.filter((t) => t.id.startsWith("to-cancel-"));
    assert.ok(cancelled.every((t) => t.state === TaskState.TASK_STATE_CANCELLED));
  } finally {
    tikk.close();
  }
});

function later(taskId?: string) {
  return { queue: "ts-later", handler: "h", taskId, delayMs: HOUR };
}
