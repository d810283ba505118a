/** The tikk TypeScript client: `TikkClient` and the generated message types it uses. */
export * from "./client";
export { Task, TaskState } from "./gen/tikk/v1/tasks";
export { Run, RunStatus } from "./gen/tikk/v1/history";
export { Schedule, PreviewedOccurrence } from "./gen/tikk/v1/schedules";
export { Servers, parseServers } from "./servers";
