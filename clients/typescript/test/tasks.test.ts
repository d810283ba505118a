/** The client against a real plaintext `tikk dev` (with a worker on queue "e2e"). */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";

import { ImportResult, RunStatus, TaskInput, TaskState, TikkClient, TikkError } from "../src/index";
import { ADDR, NO_SERVER, eventually, freshNamespace } from "./helpers";

const HOUR = 3_600_000;
let tikk: TikkClient;

before(() => {
  if (ADDR) tikk = new TikkClient(ADDR, { namespace: freshNamespace() });
});
after(() => tikk?.close());

/** `count` tasks of `queue` due in an hour, with ids `<prefix>-<n>`. */
function tasks(queue: string, prefix: string, count: number): TaskInput[] {
  return Array.from({ length: count }, (_, i) => ({ queue, handler: "h", taskId: `${prefix}-${i}`, delayMs: HOUR }));
}

test("create with a client id twice makes one task", { skip: NO_SERVER }, async () => {
  const input: TaskInput = { queue: "ts-idem", handler: "h", payload: "p", taskId: "order-42", delayMs: HOUR };
  const first = await tikk.createTask(input);
  const again = await tikk.createTask(input);
  assert.equal(first.created, true);
  assert.equal(again.created, false);
  assert.equal(again.task.id, "order-42");
  const page = await tikk.listTasks({ queue: "ts-idem" });
  assert.deepEqual(page.items.map((t) => t.id), ["order-42"]);
});

test("get returns the task and a missing one is NOT_FOUND", { skip: NO_SERVER }, async () => {
  const payload = Buffer.from([1, 2]);
  await tikk.createTask({ queue: "ts-get", handler: "h", payload, taskId: "g-1", labels: { team: "a" }, delayMs: HOUR });
  const task = await tikk.getTask("g-1");
  assert.equal(task.queue, "ts-get");
  assert.equal(task.state, TaskState.TASK_STATE_SCHEDULED);
  assert.deepEqual([...task.payload], [1, 2]);
  assert.deepEqual(task.labels, { team: "a" });
  await assert.rejects(tikk.getTask("no-such-task"), (err: unknown) => {
    assert.ok(err instanceof TikkError);
    assert.equal(err.code, grpc.status.NOT_FOUND);
    return true;
  });
});

test("cancel cancels a scheduled task", { skip: NO_SERVER }, async () => {
  await tikk.createTask({ queue: "ts-cancel", handler: "h", taskId: "c-1", delayMs: HOUR });
  const cancelled = await tikk.cancelTask("c-1");
  assert.equal(cancelled.state, TaskState.TASK_STATE_CANCELLED);
  assert.equal((await tikk.getTask("c-1")).state, TaskState.TASK_STATE_CANCELLED);
});

test("a task keeps its own execution timeout", { skip: NO_SERVER }, async () => {
  const { task } = await tikk.createTask({
    queue: "ts-timeout", handler: "h", taskId: "x-1", delayMs: HOUR, executionTimeoutMs: 90_000,
  });
  assert.equal(Number(task.executionTimeout?.seconds), 90);
  const again = await tikk.getTask("x-1");
  assert.equal(Number(again.executionTimeout?.seconds), 90);
  // stopRunning is harmless on a task not dispatched yet: it is cancelled as any other.
  const cancelled = await tikk.cancelTask("x-1", { stopRunning: true });
  assert.equal(cancelled.state, TaskState.TASK_STATE_CANCELLED);
});

test("list pages through a queue's tasks", { skip: NO_SERVER }, async () => {
  for (const id of ["l-1", "l-2", "l-3"]) {
    await tikk.createTask({ queue: "ts-list", handler: "h", taskId: id, delayMs: HOUR });
  }
  const first = await tikk.listTasks({ queue: "ts-list", pageSize: 2 });
  assert.equal(first.items.length, 2);
  assert.notEqual(first.nextPageToken, "");
  const rest = await tikk.listTasks({ queue: "ts-list", pageSize: 2, pageToken: first.nextPageToken });
  const ids = [...first.items, ...rest.items].map((t) => t.id).sort();
  assert.deepEqual(ids, ["l-1", "l-2", "l-3"]);
  assert.equal(rest.nextPageToken, "");
});

test("an ImportTasks stream of 3000 tasks all arrive", { skip: NO_SERVER }, async () => {
  const count = 3000;
  const inputs = tasks("ts-import", "imp", count);
  const results: ImportResult[] = [];
  for await (const r of tikk.importTasks(inputs, { batchSize: 250, window: 4 })) results.push(r);
  assert.equal(results.length, count);
  results.forEach((r, i) => {
    assert.equal(r.index, i);
    assert.equal(r.code, grpc.status.OK, r.message);
    assert.equal(r.taskId, `imp-${i}`);
    assert.equal(r.created, true);
  });
  const stored = new Set<string>();
  let token = "";
  do {
    const page = await tikk.listTasks({ queue: "ts-import", pageSize: 1000, pageToken: token });
    page.items.forEach((t) => stored.add(t.id));
    token = page.nextPageToken;
  } while (token);
  assert.equal(stored.size, count);
  // Sent again (a resumed import), nothing is made twice.
  let created = 0;
  for await (const r of tikk.importTasks(inputs.slice(0, 500), { batchSize: 100 })) created += r.created ? 1 : 0;
  assert.equal(created, 0);
});

test("an import reads its input only as fast as the server answers", { skip: NO_SERVER }, async () => {
  const batchSize = 100;
  const window = 2;
  let pulled = 0;
  async function* inputs(): AsyncGenerator<TaskInput> {
    for (let i = 0; i < 20 * batchSize; i++) {
      pulled += 1;
      yield { queue: "ts-paced", handler: "h", taskId: `p-${i}`, delayMs: HOUR };
    }
  }
  let pulledAtFirstAnswer = -1;
  let accepted = 0;
  for await (const r of tikk.importTasks(inputs(), { batchSize, window })) {
    if (pulledAtFirstAnswer < 0) pulledAtFirstAnswer = pulled;
    accepted += r.code === grpc.status.OK ? 1 : 0;
  }
  assert.equal(accepted, 20 * batchSize);
  // The window's batches, and at most one more cut as the first answer freed its slot.
  const read = `read ${pulledAtFirstAnswer} items before the first answer`;
  assert.ok(pulledAtFirstAnswer <= (window + 1) * batchSize, read);
});

test("an import stopped early or whose input fails ends its stream", { skip: NO_SERVER }, async () => {
  const inputs = tasks("ts-stop", "s", 1000);
  let seen = 0;
  for await (const r of tikk.importTasks(inputs, { batchSize: 50, window: 2 })) {
    assert.equal(r.code, grpc.status.OK);
    if (++seen === 120) break;
  }
  function* failing(): Generator<TaskInput> {
    yield* inputs.slice(0, 30);
    throw new Error("bad input");
  }
  const answered: ImportResult[] = [];
  await assert.rejects(async () => {
    for await (const r of tikk.importTasks(failing(), { batchSize: 20 })) answered.push(r);
  }, /bad input/);
  assert.deepEqual(answered.map((r) => r.index), [...Array(30).keys()]);
  // The client still serves calls after both.
  assert.equal((await tikk.getTask("s-0")).id, "s-0");
});

test("history lists the run of a task a worker ran", { skip: NO_SERVER }, async () => {
  await tikk.createTask({ queue: "e2e", handler: "record", payload: "hello", taskId: "run-1" });
  await eventually(async () => {
    const task = await tikk.getTask("run-1");
    return task.state === TaskState.TASK_STATE_SUCCEEDED ? task : undefined;
  });
  const runs = await eventually(async () => {
    const page = await tikk.listTaskRuns("run-1");
    return page.items.length > 0 ? page.items : undefined;
  });
  assert.equal(runs[0].taskId, "run-1");
  assert.equal(runs[0].status, RunStatus.RUN_STATUS_SUCCEEDED);
  assert.equal(runs[0].attempt, 1);
});

test("a schedule and its preview of next fire times", { skip: NO_SERVER }, async () => {
  const schedule = await tikk.createSchedule({ scheduleId: "hourly", queue: "ts-sched", handler: "h", everyMs: HOUR });
  assert.equal(schedule.id, "hourly");
  assert.ok(schedule.nextFireTime instanceof Date);
  const now = Date.now();
  const next = await tikk.previewSchedule("hourly", { count: 3 });
  assert.equal(next.length, 3);
  const nominal = next.map((o) => o.nominalTime!.getTime());
  nominal.forEach((t) => assert.equal(t % HOUR, 0));
  assert.ok(nominal[0] > now - 1000 && nominal[0] <= now + HOUR);
  assert.deepEqual(nominal, [nominal[0], nominal[0] + HOUR, nominal[0] + 2 * HOUR]);
  assert.ok(next.every((o) => o.fireTime instanceof Date));
});
