/**
 * A small Promise-based client for tikk over `@grpc/grpc-js`, built on the stubs generated
 * into `./gen` (regenerate them with `scripts/ts-client.sh generate`).
 *
 * ```ts
 * const tikk = new TikkClient("127.0.0.1:7070", { namespace: "shop" });
 * const { task, created } = await tikk.createTask({ queue: "emails", handler: "send", taskId: "order-42" });
 * tikk.close();
 * ```
 */
import { once } from "node:events";
import * as grpc from "@grpc/grpc-js";

import { Duration } from "./gen/google/protobuf/duration";
import { Servers, hostCount, parseServers, serverOptions } from "./servers";
import { HistoryServiceClient, ListTaskRunsRequest, Run } from "./gen/tikk/v1/history";
import {
  CreateScheduleRequest,
  PreviewScheduleRequest,
  PreviewedOccurrence,
  Schedule,
  ScheduleServiceClient,
  ScheduleSpec,
} from "./gen/tikk/v1/schedules";
import {
  CancelTaskRequest,
  CreateTaskRequest,
  GetTaskRequest,
  ImportTasksRequest,
  ImportTasksResponse,
  ListTasksRequest,
  RetryPolicy,
  Task,
  TaskServiceClient,
  TaskState,
} from "./gen/tikk/v1/tasks";

/** How to reach the server. Without `tls` the channel is plaintext. */
export interface TikkClientOptions {
  /** The namespace of every call; empty or absent means the server's default. */
  namespace?: string;
  /** TLS trusting `ca` (PEM); `serverName` checks the certificate for that name instead of
   * the address's host. */
  tls?: { ca: Buffer | string; serverName?: string };
  /** A bearer token sent with every call as `authorization: Bearer <token>`. Over plaintext
   * it is only sent to a loopback address. */
  token?: string;
  /** Deadline of each unary call in milliseconds (default 30 000). */
  timeoutMs?: number;
}

/** A failed call; `code` is the gRPC status code (`grpc.status`). */
export class TikkError extends Error {
  constructor(
    readonly code: grpc.status,
    readonly details: string,
    readonly metadata?: grpc.Metadata,
  ) {
    super(`${grpc.status[code] ?? code}: ${details}`);
    this.name = "TikkError";
  }

  /** The error of a failed gRPC call, keeping its code. */
  static from(err: grpc.ServiceError): TikkError {
    return new TikkError(err.code ?? grpc.status.UNKNOWN, err.details ?? err.message, err.metadata);
  }
}

/** An import whose stream broke: the items before `nextIndex` have results (`answered` of
 * them in this stream); send the rest again (with task ids of your own nothing is made twice). */
export class ImportInterrupted extends TikkError {
  constructor(
    cause: TikkError,
    readonly answered: number,
    readonly nextIndex: number,
  ) {
    super(cause.code, cause.details, cause.metadata);
    this.name = "ImportInterrupted";
  }
}

/** One task to create. `runAt` or `delayMs` says when it runs; neither means now. */
export interface TaskInput {
  queue: string;
  handler: string;
  payload?: Uint8Array | string;
  /** The client's id of the task: a create sent again with the same id and content returns
   * the existing task (`created: false`) instead of making a second one. Empty: the server
   * assigns one. */
  taskId?: string;
  labels?: Record<string, string>;
  runAt?: Date;
  delayMs?: number;
  /** Fields left out take the server's defaults (3 attempts, 1 s, x2, 5 min, full jitter). */
  retry?: {
    maxAttempts?: number;
    initialBackoffMs?: number;
    multiplier?: number;
    maxBackoffMs?: number;
    jitter?: number;
  };
  /** Dead-letter an attempt that no worker started this long after its due time. */
  startTimeoutMs?: number;
  /** Stop a run that takes longer (instead of its handler's own timeout); 1 s to a day. */
  executionTimeoutMs?: number;
}

/** A recurring schedule: exactly one of `cron` and `everyMs`. */
export interface ScheduleInput {
  /** Empty: the server assigns one. */
  scheduleId?: string;
  queue: string;
  handler: string;
  payload?: Uint8Array | string;
  cron?: string;
  everyMs?: number;
  /** IANA zone name of `cron`; empty means UTC. */
  timezone?: string;
  labels?: Record<string, string>;
  paused?: boolean;
}

/** One item's outcome in an import; `code` is 0 (OK) when the task was accepted. */
export interface ImportResult {
  index: number;
  taskId: string;
  created: boolean;
  code: grpc.status;
  message: string;
}

/** Options of `importTasks`. */
export interface ImportOptions {
  /** Tasks per batch (default 1000; the server refuses batches over its limit, 5000 by default). */
  batchSize?: number;
  /** Batches sent and not yet answered at most (default 4, what the server works on at once). */
  window?: number;
  /** The index of the first item, when resuming (default 0). */
  firstIndex?: number;
}

/** A page of a listing; an empty `nextPageToken` means the last page. */
export interface Page<T> {
  items: T[];
  nextPageToken: string;
}

type Callback<Res> = (err: grpc.ServiceError | null, res: Res) => void;
type UnaryMethod<Req, Res> = (
  req: Req,
  md: grpc.Metadata,
  opts: Partial<grpc.CallOptions>,
  cb: Callback<Res>,
) => grpc.ClientUnaryCall;

/** The tikk API: tasks, bulk import, run history and schedules, over one channel. */
export class TikkClient {
  readonly namespace: string;
  private readonly channel: grpc.Channel;
  private readonly tasks: TaskServiceClient;
  private readonly history: HistoryServiceClient;
  private readonly schedules: ScheduleServiceClient;
  private readonly token: string;
  private readonly timeoutMs: number;
  private readonly servers: Servers;

  /** Opens a channel to `address` (`host:port`), or to several servers, calls balanced over
   * them (`./servers`: `"10.0.0.1:7070,10.0.0.2:7070"`, `"dns:///tikk.internal:7070"`); it
   * connects at the first call. A list it cannot dial is a `TypeError` naming the entry. */
  constructor(address: string, options: TikkClientOptions = {}) {
    this.namespace = options.namespace ?? "";
    this.token = options.token ?? "";
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.servers = parseServers(address);
    if (this.token && !/^[!-~]+$/.test(this.token)) {
      throw new TypeError("a token is one line of printable ASCII without spaces");
    }
    const inClear = this.token && !options.tls ? this.servers.addresses : [];
    for (const server of inClear.filter((server) => !isLoopback(server))) {
      throw new TypeError(`a token is sent over TLS only (or to a loopback address); ${server} is neither`);
    }
    if (options.tls && !options.tls.serverName && hostCount(this.servers) > 1) {
      throw new TypeError(`the servers of ${address} are checked against one name over TLS, and they are on different hosts: give the name their certificates share (tls.serverName)`);
    }
    const channelOptions = serverOptions(this.servers, options.tls?.serverName ?? "");
    let credentials = grpc.credentials.createInsecure();
    if (options.tls) {
      const ca = options.tls.ca;
      credentials = grpc.credentials.createSsl(typeof ca === "string" ? Buffer.from(ca) : ca);
      if (options.tls.serverName) {
        channelOptions["grpc.ssl_target_name_override"] = options.tls.serverName;
        channelOptions["grpc.default_authority"] = options.tls.serverName;
      }
    }
    const target = this.servers.target;
    this.channel = new grpc.Channel(target, credentials, channelOptions);
    const shared = { channelOverride: this.channel };
    this.tasks = new TaskServiceClient(target, credentials, shared);
    this.history = new HistoryServiceClient(target, credentials, shared);
    this.schedules = new ScheduleServiceClient(target, credentials, shared);
  }

  /** Closes the channel; calls in progress are cancelled. */
  close(): void {
    this.channel.close();
  }

  /** Creates a task. With a `taskId` the create is idempotent: sent again, it returns the
   * task made the first time with `created: false`; so only then is it sent again to another
   * server after UNAVAILABLE. */
  async createTask(input: TaskInput): Promise<{ task: Task; created: boolean }> {
    const create = this.tasks.createTask.bind(this.tasks);
    const answer = await this.unary(create, this.taskRequest(input), Boolean(input.taskId));
    return { task: answer.task!, created: answer.created };
  }

  /** The task `taskId` (NOT_FOUND when there is none). */
  getTask(taskId: string): Promise<Task> {
    const request = GetTaskRequest.fromPartial({ namespace: this.namespace, taskId });
    return this.unary(this.tasks.getTask.bind(this.tasks), request, true);
  }

  /** Cancels a task not dispatched yet; a dispatched one is FAILED_PRECONDITION unless
   * `stopRunning`, which stops its run (the rules are CancelTask's in tasks.proto). */
  cancelTask(taskId: string, options: { stopRunning?: boolean } = {}): Promise<Task> {
    const request = CancelTaskRequest.fromPartial({
      namespace: this.namespace,
      taskId,
      stopRunning: options.stopRunning ?? false,
    });
    return this.unary(this.tasks.cancelTask.bind(this.tasks), request, true);
  }

  /** One page of the tasks of `queue` (or of a `labelSelector` such as `team=a`), optionally
   * in one `state`. */
  async listTasks(query: {
    queue?: string;
    state?: TaskState;
    labelSelector?: string;
    pageSize?: number;
    pageToken?: string;
  }): Promise<Page<Task>> {
    const request = ListTasksRequest.fromPartial({
      namespace: this.namespace,
      queue: query.queue ?? "",
      state: query.state ?? TaskState.TASK_STATE_UNSPECIFIED,
      labelSelector: query.labelSelector ?? "",
      pageSize: query.pageSize ?? 0,
      pageToken: query.pageToken ?? "",
    });
    const answer = await this.unary(this.tasks.listTasks.bind(this.tasks), request, true);
    return { items: answer.tasks, nextPageToken: answer.nextPageToken };
  }

  /** One page of the runs of a task (its history), newest first. */
  async listTaskRuns(
    taskId: string,
    page: { pageSize?: number; pageToken?: string } = {},
  ): Promise<Page<Run>> {
    const request = ListTaskRunsRequest.fromPartial({
      namespace: this.namespace,
      taskId,
      pageSize: page.pageSize ?? 0,
      pageToken: page.pageToken ?? "",
    });
    const answer = await this.unary(this.history.listTaskRuns.bind(this.history), request, true);
    return { items: answer.runs, nextPageToken: answer.nextPageToken };
  }

  /** Creates a recurring schedule. */
  async createSchedule(input: ScheduleInput): Promise<Schedule> {
    if (!input.cron === (input.everyMs === undefined)) {
      throw new TypeError("give exactly one of cron and everyMs");
    }
    const schedule = Schedule.fromPartial({
      namespace: this.namespace,
      id: input.scheduleId ?? "",
      spec: ScheduleSpec.fromPartial({
        cron: input.cron ?? "",
        interval: input.everyMs === undefined ? undefined : duration(input.everyMs),
        timezone: input.timezone ?? "",
      }),
      queue: input.queue,
      handler: input.handler,
      payload: bytes(input.payload),
      labels: input.labels ?? {},
      paused: input.paused ?? false,
    });
    const request = CreateScheduleRequest.fromPartial({ schedule });
    const create = this.schedules.createSchedule.bind(this.schedules);
    return this.unary(create, request, Boolean(input.scheduleId));
  }

  /** The next fire times of schedule `scheduleId` (`count` of them, default the server's),
   * strictly after `after` (default now). */
  async previewSchedule(
    scheduleId: string,
    options: { count?: number; after?: Date; until?: Date } = {},
  ): Promise<PreviewedOccurrence[]> {
    const request = PreviewScheduleRequest.fromPartial({
      schedule: { namespace: this.namespace, scheduleId },
      afterTime: options.after,
      untilTime: options.until,
      count: options.count ?? 0,
    });
    const preview = this.schedules.previewSchedule.bind(this.schedules);
    const answer = await this.unary(preview, request, true);
    return answer.occurrences;
  }

  /**
   * Imports tasks of any number through the `ImportTasks` stream, yielding one result per
   * item in input order. At most `window` batches are unanswered at once and the input is
   * read only as a slot frees, so a long (or endless async) input is paced by the server;
   * a write grpc-js cannot take at once waits for its `drain`. A broken stream throws
   * `ImportInterrupted` saying where to resume.
   */
  async *importTasks(
    items: Iterable<TaskInput> | AsyncIterable<TaskInput>,
    options: ImportOptions = {},
  ): AsyncGenerator<ImportResult> {
    const size = options.batchSize ?? 1000;
    const window = options.window ?? 4;
    if (!(size >= 1 && window >= 1)) throw new RangeError("batchSize and window must be at least 1");
    const call = this.tasks.importTasks(this.metadata(), {});
    const toRequest = (input: TaskInput) => this.taskRequest(input);
    const feed = new ImportFeed(call, items, window, size, toRequest, options.firstIndex ?? 0);
    const feeding = feed.run();
    let answered = 0;
    try {
      for await (const answer of call as AsyncIterable<ImportTasksResponse>) {
        const results = feed.results(answer);
        answered += results.length;
        feed.release();
        yield* results;
      }
    } catch (err) {
      throw new ImportInterrupted(asTikkError(err), answered, feed.nextIndex);
    } finally {
      feed.stop();
      call.on("error", () => {}); // the CANCELLED of the cancel below, or an error already seen
      call.cancel();
    }
    await feeding;
    if (feed.inputError !== undefined) throw feed.inputError;
  }

  private taskRequest(input: TaskInput): CreateTaskRequest {
    if (input.runAt !== undefined && input.delayMs !== undefined) {
      throw new TypeError("give runAt or delayMs, not both");
    }
    const r = input.retry;
    // fromPartial: a field a newer proto adds takes its default, so this still compiles.
    return CreateTaskRequest.fromPartial({
      namespace: this.namespace,
      taskId: input.taskId ?? "",
      queue: input.queue,
      handler: input.handler,
      payload: bytes(input.payload),
      labels: input.labels ?? {},
      retryPolicy: r && RetryPolicy.fromPartial({
        maxAttempts: r.maxAttempts,
        initialBackoff: r.initialBackoffMs === undefined ? undefined : duration(r.initialBackoffMs),
        multiplier: r.multiplier,
        maxBackoff: r.maxBackoffMs === undefined ? undefined : duration(r.maxBackoffMs),
        jitter: r.jitter,
      }),
      runAt: input.runAt,
      delay: input.delayMs === undefined ? undefined : duration(input.delayMs),
      startTimeout: input.startTimeoutMs === undefined ? undefined : duration(input.startTimeoutMs),
      executionTimeout:
        input.executionTimeoutMs === undefined ? undefined : duration(input.executionTimeoutMs),
    });
  }

  private metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.token) md.set("authorization", `Bearer ${this.token}`);
    return md;
  }

  /** One call within `timeoutMs`. With several servers, a call that is `repeatable` (safe to
   * send again: reads, cancels, creates under an id of the caller's) and ends UNAVAILABLE is
   * sent again after a short jittered wait, which round robin gives to another server; once
   * per server (three times for a DNS name), all within the same deadline. */
  private async unary<Req, Res>(method: UnaryMethod<Req, Res>, request: Req, repeatable = false): Promise<Res> {
    const deadline = Date.now() + this.timeoutMs;
    const attempts = repeatable && this.servers.balanced ? Math.max(3, this.servers.addresses.length) : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await new Promise<Res>((resolve, reject) => {
          method(request, this.metadata(), { deadline }, (err, res) => (err ? reject(TikkError.from(err)) : resolve(res)));
        });
      } catch (err) {
        const wait = Math.random() * 50 * 2 ** attempt;
        const again = err instanceof TikkError && err.code === grpc.status.UNAVAILABLE && attempt < attempts;
        if (!again || Date.now() + wait >= deadline) throw err;
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }
}

/** The request side of one import: batches cut from the input only while fewer than
 * `window` are unanswered, the unanswered ones kept oldest first (the server answers in
 * order). */
class ImportFeed {
  private readonly items: AsyncIterator<TaskInput> | Iterator<TaskInput>;
  private readonly unanswered: { first: number; ids: string[] }[] = [];
  private free: number;
  private wake: (() => void) | undefined;
  private stopped = false;
  private sent: number;
  private answeredItems = 0;
  inputError: unknown;

  constructor(
    private readonly call: grpc.ClientDuplexStream<ImportTasksRequest, ImportTasksResponse>,
    items: Iterable<TaskInput> | AsyncIterable<TaskInput>,
    window: number,
    private readonly size: number,
    private readonly toRequest: (input: TaskInput) => CreateTaskRequest,
    private readonly firstIndex: number,
  ) {
    this.free = window;
    this.sent = firstIndex;
    this.items = Symbol.asyncIterator in items ? items[Symbol.asyncIterator]() : items[Symbol.iterator]();
  }

  /** The index of the first item without a result. */
  get nextIndex(): number {
    return this.firstIndex + this.answeredItems;
  }

  /** Sends batches while slots are free, then half-closes the stream. Never rejects. */
  async run(): Promise<void> {
    try {
      for (;;) {
        while (this.free === 0 && !this.stopped) await new Promise<void>((r) => (this.wake = r));
        if (this.stopped) return;
        const chunk = await this.nextChunk();
        if (chunk.length > 0) {
          this.free -= 1;
          const first = this.sent;
          this.sent += chunk.length;
          this.unanswered.push({ first, ids: chunk.map((t) => t.taskId) });
          if (!this.call.write({ tasks: chunk, batchId: first })) await once(this.call, "drain");
        }
        if (chunk.length < this.size || this.inputError !== undefined) break;
      }
      if (!this.stopped) this.call.end();
    } catch {
      // The stream broke (the reader sees the same error) or was cancelled.
    }
  }

  private async nextChunk(): Promise<CreateTaskRequest[]> {
    const chunk: CreateTaskRequest[] = [];
    try {
      while (chunk.length < this.size) {
        const next = await this.items.next();
        if (next.done) break;
        chunk.push(this.toRequest(next.value));
      }
    } catch (err) {
      this.inputError = err; // the caller's input: thrown after the items read before it
    }
    return chunk;
  }

  /** One result per item of the oldest unanswered batch, which `answer` answers. */
  results(answer: ImportTasksResponse): ImportResult[] {
    const batch = this.unanswered.shift();
    const complete = answer.code !== 0 || answer.results.length === batch?.ids.length;
    if (!batch || answer.batchId !== batch.first || !complete) {
      const due = batch ? `batch ${batch.first}` : "no batch";
      throw new TikkError(grpc.status.INTERNAL, `the server answered batch ${answer.batchId} where ${due} was due`);
    }
    this.answeredItems += batch.ids.length;
    if (answer.code !== 0) {
      // The whole batch was refused (e.g. over the server's batch limit): nothing of it is stored.
      const { code, message } = answer;
      return batch.ids.map((taskId, i) => ({ index: batch.first + i, taskId, created: false, code, message }));
    }
    return answer.results.map((r) => ({
      index: batch.first + r.index,
      taskId: r.taskId,
      created: r.created,
      code: r.code,
      message: r.message,
    }));
  }

  /** A batch was answered: its slot is free again. */
  release(): void {
    this.free += 1;
    this.wake?.();
  }

  /** Ends the feed (the import is over or broken). */
  stop(): void {
    this.stopped = true;
    this.wake?.();
  }
}

function asTikkError(err: unknown): TikkError {
  if (err instanceof TikkError) return err;
  const e = err as Partial<grpc.ServiceError>;
  if (typeof e?.code === "number") return TikkError.from(e as grpc.ServiceError);
  return new TikkError(grpc.status.UNKNOWN, String(err));
}

function bytes(payload: Uint8Array | string | undefined): Buffer {
  if (payload === undefined) return Buffer.alloc(0);
  return typeof payload === "string" ? Buffer.from(payload, "utf8") : Buffer.from(payload);
}

function duration(ms: number): Duration {
  const seconds = Math.floor(ms / 1000);
  return { seconds, nanos: Math.round((ms - seconds * 1000) * 1e6) };
}

/** Whether `address` (`host:port`) reaches only this machine. */
function isLoopback(address: string): boolean {
  const target = address.replace(/^(dns|ipv4|ipv6):(\/\/\/)?/, "");
  if (/^unix(-abstract)?:/.test(target)) return true;
  const host = target.startsWith("[") ? target.slice(1, target.indexOf("]")) : target.replace(/:\d+$/, "");
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}
