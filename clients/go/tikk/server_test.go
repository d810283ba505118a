package tikk

// Tests against a real tikk server: TIKK_ADDR is `tikk dev` (plaintext, with its dispatcher)
// and a worker of tests/e2e/worker_app.py consuming queue "e2e"; TIKK_TLS_ADDR, TIKK_CA and
// TIKK_TOKEN are a `tikk dev --auth` serving TLS and a token granting write on namespace
// "go-tls". Without them the tests skip; tests/e2e/test_go_client.py starts the processes,
// runs these tests and checks that none skipped.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// dial connects to TIKK_ADDR in a namespace of the test's own, or skips the test.
func dial(t *testing.T) (*Client, context.Context) {
	t.Helper()
	addr := os.Getenv("TIKK_ADDR")
	if addr == "" {
		t.Skip("TIKK_ADDR is not set: no tikk server to test against")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	suffix := make([]byte, 6)
	rand.Read(suffix)
	c, err := Dial(ctx, addr, WithNamespace("go-"+hex.EncodeToString(suffix)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ctx
}

func later(id string) TaskSpec {
	return TaskSpec{ID: id, Queue: "later", Handler: "h", Payload: []byte("p"), Delay: time.Hour,
		Labels: map[string]string{"team": "go"}}
}

func TestCreateWithAClientIDTwiceIsOneTask(t *testing.T) {
	c, ctx := dial(t)
	first, created, err := c.CreateTask(ctx, later("same"))
	if err != nil || !created {
		t.Fatalf("first create: created=%v err=%v", created, err)
	}
	again, created, err := c.CreateTask(ctx, later("same"))
	if err != nil || created {
		t.Fatalf("second create: created=%v err=%v, want the existing task", created, err)
	}
	if again.GetId() != first.GetId() || !again.GetCreateTime().AsTime().Equal(first.GetCreateTime().AsTime()) {
		t.Fatalf("the resend answered %v, not the task created first %v", again, first)
	}
	tasks, _, err := c.ListTasks(ctx, TaskQuery{Queue: "later"}, "")
	if err != nil || len(tasks) != 1 {
		t.Fatalf("%d tasks listed (%v), want 1", len(tasks), err)
	}
	other := later("same")
	other.Payload = []byte("different")
	_, _, err = c.CreateTask(ctx, other)
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("another task under the same id: %v, want codes.AlreadyExists", err)
	}
}

func TestGetTask(t *testing.T) {
	c, ctx := dial(t)
	if _, _, err := c.CreateTask(ctx, later("got")); err != nil {
		t.Fatal(err)
	}
	task, err := c.GetTask(ctx, "got")
	if err != nil {
		t.Fatal(err)
	}
	if task.GetNamespace() != c.Namespace() || task.GetQueue() != "later" || string(task.GetPayload()) != "p" ||
		task.GetState() != tikkv1.TaskState_TASK_STATE_SCHEDULED || task.GetLabels()["team"] != "go" {
		t.Fatalf("got %v", task)
	}
	if due := time.Until(task.GetDueTime().AsTime()); due < 50*time.Minute || due > time.Hour {
		t.Fatalf("due in %v, want about an hour", due)
	}
	_, err = c.GetTask(ctx, "none")
	if s, ok := status.FromError(err); !ok || s.Code() != codes.NotFound {
		t.Fatalf("a missing task: %v, want a codes.NotFound status", err)
	}
}

func TestCancelTask(t *testing.T) {
	c, ctx := dial(t)
	if _, _, err := c.CreateTask(ctx, later("doomed")); err != nil {
		t.Fatal(err)
	}
	task, err := c.CancelTask(ctx, "doomed")
	if err != nil || task.GetState() != tikkv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("cancel: %v %v", task, err)
	}
	if task, err = c.GetTask(ctx, "doomed"); err != nil || task.GetState() != tikkv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("after cancel: %v %v", task, err)
	}
	if _, err = c.CancelTask(ctx, "none"); status.Code(err) != codes.NotFound {
		t.Fatalf("cancel of a missing task: %v, want codes.NotFound", err)
	}
}

func TestExecutionTimeoutAndStopTask(t *testing.T) {
	c, ctx := dial(t)
	spec := later("bounded")
	spec.ExecutionTimeout = 90 * time.Second
	task, _, err := c.CreateTask(ctx, spec)
	if err != nil || task.GetExecutionTimeout().AsDuration() != 90*time.Second {
		t.Fatalf("create with an execution timeout: %v %v", task, err)
	}
	// Not dispatched yet: stopping it is a plain cancel.
	if task, err = c.StopTask(ctx, "bounded"); err != nil || task.GetState() != tikkv1.TaskState_TASK_STATE_CANCELLED {
		t.Fatalf("stop: %v %v", task, err)
	}
}

func TestListTasks(t *testing.T) {
	c, ctx := dial(t)
	for i := range 5 {
		if _, _, err := c.CreateTask(ctx, later(fmt.Sprintf("l-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CancelTask(ctx, "l-0"); err != nil {
		t.Fatal(err)
	}
	page, next, err := c.ListTasks(ctx, TaskQuery{Queue: "later", PageSize: 2}, "")
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("first page: %d tasks, next %q, %v", len(page), next, err)
	}
	ids := map[string]bool{}
	for task, err := range c.Tasks(ctx, TaskQuery{Queue: "later", PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids[task.GetId()] = true
	}
	if len(ids) != 5 {
		t.Fatalf("listed %v, want l-0 .. l-4", ids)
	}
	scheduled := 0
	for _, err := range c.Tasks(ctx, TaskQuery{Queue: "later", State: tikkv1.TaskState_TASK_STATE_SCHEDULED}) {
		if err != nil {
			t.Fatal(err)
		}
		scheduled++
	}
	if scheduled != 4 {
		t.Fatalf("%d scheduled tasks, want 4", scheduled)
	}
}

func TestImportTasksAllArrive(t *testing.T) {
	c, ctx := dial(t)
	const n = 3000
	tasks := func(yield func(TaskSpec) bool) {
		for i := range n {
			if !yield(later(fmt.Sprintf("imp-%05d", i))) {
				return
			}
		}
	}
	created := 0
	for r, err := range c.ImportTasks(ctx, tasks, ImportOptions{BatchSize: 250, Window: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Err != nil || r.TaskID != fmt.Sprintf("imp-%05d", r.Index) || r.Index != int64(created) {
			t.Fatalf("result %d: %+v", created, r)
		}
		if r.Created {
			created++
		}
	}
	if created != n {
		t.Fatalf("%d tasks created, want %d", created, n)
	}
	stored := 0
	for task, err := range c.Tasks(ctx, TaskQuery{Queue: "later", PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(task.GetId(), "imp-") {
			stored++
		}
	}
	if stored != n {
		t.Fatalf("%d tasks stored, want %d", stored, n)
	}
	// Sent again (a resumed import), nothing is created twice.
	for r, err := range c.ImportTasks(ctx, tasks, ImportOptions{}) {
		if err != nil || r.Err != nil || r.Created {
			t.Fatalf("import again: %+v %v", r, err)
		}
	}
}

func TestHistoryAfterATaskRan(t *testing.T) {
	c, ctx := dial(t)
	began := time.Now().Add(-time.Minute)
	_, _, err := c.CreateTask(ctx, TaskSpec{ID: "ran", Queue: "e2e", Handler: "record", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	for {
		task, err := c.GetTask(ctx, "ran")
		if err != nil {
			t.Fatalf("waiting for the worker to run the task: %v", err)
		}
		if task.GetState() == tikkv1.TaskState_TASK_STATE_SUCCEEDED {
			break
		}
		if task.GetState() != tikkv1.TaskState_TASK_STATE_SCHEDULED && task.GetState() != tikkv1.TaskState_TASK_STATE_DISPATCHED {
			t.Fatalf("the task ended %s at attempt %d: %s: %s", task.GetState(), task.GetAttempt(),
				task.GetLastErrorType(), task.GetLastErrorMessage())
		}
		time.Sleep(200 * time.Millisecond)
	}
	runs, _, err := c.ListTaskRuns(ctx, "ran", 0, "")
	if err != nil || len(runs) != 1 {
		t.Fatalf("%d runs (%v), want 1", len(runs), err)
	}
	run := runs[0]
	if run.GetStatus() != tikkv1.RunStatus_RUN_STATUS_SUCCEEDED || string(run.GetOutput()) != "ok:x" || run.GetAttempt() != 1 {
		t.Fatalf("the run: %v", run)
	}
	all, _, err := c.ListRuns(ctx, RunQuery{Queue: "e2e", Start: began, End: time.Now().Add(time.Minute)}, "")
	if err != nil || len(all) != 1 || all[0].GetRunId() != run.GetRunId() {
		t.Fatalf("ListRuns: %v %v, want the one run", all, err)
	}
	failed, _, err := c.ListRuns(ctx, RunQuery{Queue: "e2e", Status: tikkv1.RunStatus_RUN_STATUS_FAILED}, "")
	if err != nil || len(failed) != 0 {
		t.Fatalf("failed runs: %v %v, want none", failed, err)
	}
}

func TestScheduleAndItsPreview(t *testing.T) {
	c, ctx := dial(t)
	spec := &tikkv1.ScheduleSpec{Cron: "0 9 * * *", Timezone: "Europe/Oslo"}
	s, err := c.CreateSchedule(ctx, &tikkv1.Schedule{Id: "daily", Spec: spec, Queue: "later", Handler: "digest"})
	if err != nil {
		t.Fatal(err)
	}
	if s.GetNamespace() != c.Namespace() || s.GetNextFireTime() == nil {
		t.Fatalf("created %v", s)
	}
	next := s.GetNextFireTime().AsTime()
	occurrences, err := c.PreviewSchedule(ctx, "daily", s.GetCreateTime().AsTime(), 3)
	if err != nil || len(occurrences) != 3 {
		t.Fatalf("preview: %v %v", occurrences, err)
	}
	if first := occurrences[0].GetFireTime().AsTime(); !first.Equal(next) {
		t.Fatalf("the preview's first fire time %v is not the schedule's next %v", first, next)
	}
	for i, o := range occurrences {
		if !strings.HasPrefix(strings.SplitN(o.GetLocalTime(), " ", 2)[1], "09:00:00") {
			t.Fatalf("occurrence %d at %q, want 09:00 Oslo time", i, o.GetLocalTime())
		}
		if i > 0 && o.GetNominalTime().AsTime().Sub(occurrences[i-1].GetNominalTime().AsTime()) != 24*time.Hour {
			t.Fatalf("occurrences %d and %d are not a day apart: %v", i-1, i, occurrences)
		}
	}
	hourly := &tikkv1.ScheduleSpec{Interval: durationpb.New(time.Hour)}
	spec2, err := c.PreviewSpec(ctx, hourly, time.Date(2030, 1, 1, 0, 30, 0, 0, time.UTC), 2)
	if err != nil || len(spec2) != 2 || !spec2[0].GetFireTime().AsTime().Equal(time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("preview of a spec: %v %v", spec2, err)
	}
}

func TestTLSWithAToken(t *testing.T) {
	addr, ca, token := os.Getenv("TIKK_TLS_ADDR"), os.Getenv("TIKK_CA"), os.Getenv("TIKK_TOKEN")
	if addr == "" || ca == "" || token == "" {
		t.Skip("TIKK_TLS_ADDR, TIKK_CA and TIKK_TOKEN are not all set: no TLS server to test against")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, WithTLS(ca, ""), WithToken(token), WithNamespace("go-tls"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.CreateTask(ctx, later("secure")); err != nil {
		t.Fatal(err)
	}
	if task, err := c.GetTask(ctx, "secure"); err != nil || task.GetId() != "secure" {
		t.Fatalf("get over TLS: %v %v", task, err)
	}
	elsewhere, err := Dial(ctx, addr, WithTLS(ca, ""), WithToken(token), WithNamespace("not-mine"))
	if err != nil {
		t.Fatal(err)
	}
	defer elsewhere.Close()
	if _, _, err := elsewhere.CreateTask(ctx, later("x")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a create outside the token's namespace: %v, want codes.PermissionDenied", err)
	}
	anonymous, err := Dial(ctx, addr, WithTLS(ca, ""), WithNamespace("go-tls"))
	if err != nil {
		t.Fatal(err)
	}
	defer anonymous.Close()
	if _, err := anonymous.GetTask(ctx, "secure"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a call without the token: %v, want codes.Unauthenticated", err)
	}
}
