/** The client against a real `tikk dev` serving TLS and requiring a bearer token. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import * as grpc from "@grpc/grpc-js";

import { ImportInterrupted, TikkClient, TikkError } from "../src/index";

const TLS_ADDR = process.env.TIKK_TLS_ADDR ?? "";
const CA = process.env.TIKK_CA ?? "";
const TOKEN = process.env.TIKK_TOKEN ?? "";
/** The namespace the token may write (tests/e2e/test_ts_client.py grants it). */
const NAMESPACE = process.env.TIKK_TLS_NAMESPACE ?? "ts-tls";
const NO_TLS_SERVER = TLS_ADDR && CA && TOKEN ? false : "TIKK_TLS_ADDR, TIKK_CA and TIKK_TOKEN are not all set";

function client(token?: string): TikkClient {
  // The development certificate names localhost: serverName is checked instead of the IP.
  const tls = { ca: readFileSync(CA), serverName: "localhost" };
  return new TikkClient(TLS_ADDR, { namespace: NAMESPACE, token, tls });
}

test("TLS with a token creates, gets and imports", { skip: NO_TLS_SERVER }, async () => {
  const tikk = client(TOKEN);
  try {
    const made = await tikk.createTask({ queue: "ts-tls", handler: "h", taskId: "tls-1", delayMs: 3_600_000 });
    assert.equal(made.created, true);
    assert.equal((await tikk.getTask("tls-1")).id, "tls-1");
    const inputs = Array.from({ length: 10 }, (_, i) => ({ queue: "ts-tls", handler: "h", taskId: `tls-imp-${i}` }));
    let accepted = 0;
    for await (const r of tikk.importTasks(inputs, { batchSize: 4 })) accepted += r.code === grpc.status.OK ? 1 : 0;
    assert.equal(accepted, 10);
  } finally {
    tikk.close();
  }
});

test("TLS without a token is UNAUTHENTICATED, unary and streaming", { skip: NO_TLS_SERVER }, async () => {
  const tikk = client();
  try {
    await assert.rejects(tikk.getTask("tls-1"), (err: unknown) => {
      assert.ok(err instanceof TikkError);
      assert.equal(err.code, grpc.status.UNAUTHENTICATED);
      return true;
    });
    await assert.rejects(async () => {
      for await (const _ of tikk.importTasks([{ queue: "ts-tls", handler: "h" }])) assert.fail("no result expected");
    }, (err: unknown) => {
      assert.ok(err instanceof ImportInterrupted);
      assert.equal(err.code, grpc.status.UNAUTHENTICATED);
      assert.equal(err.nextIndex, 0);
      return true;
    });
  } finally {
    tikk.close();
  }
});

test("a token is not sent in clear to a remote address", () => {
  assert.throws(() => new TikkClient("tikk.example:7070", { token: "tikk_x_y" }), TypeError);
  new TikkClient("127.0.0.1:7070", { token: "tikk_x_y" }).close();
});
