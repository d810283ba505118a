/** What the tests share: the server's address from the environment and small waits. */
import { randomUUID } from "node:crypto";

/** Address of a plaintext `tikk dev` with a worker on queue "e2e"; unset: the tests skip. */
export const ADDR = process.env.TIKK_ADDR ?? "";
/** Why a test needing the plaintext server skips, or false when it runs. */
export const NO_SERVER = ADDR ? false : "TIKK_ADDR is not set (tests/e2e/test_ts_client.py sets it)";

/** A namespace of its own for each test, so tests sharing a server do not see each other. */
export function freshNamespace(): string {
  return `ts-${randomUUID().slice(0, 12)}`;
}

/** Polls `check` until it returns a value (not undefined), failing after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`not true after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
