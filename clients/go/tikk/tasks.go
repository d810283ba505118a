package tikk

import (
	"context"
	"iter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// TaskSpec is one task to create.
type TaskSpec struct {
	// ID is the client's id of the task. With one, a create is idempotent: sending the same
	// task again (a retry after a lost answer, an import resumed) returns the existing task
	// with created false, and a different task under the same id is codes.AlreadyExists.
	// Empty: the server assigns an id, and each send creates another task.
	ID      string
	Queue   string
	Handler string
	Payload []byte
	Labels  map[string]string
	// When the first attempt is due: RunAt if set, else Delay from now; neither means now.
	RunAt time.Time
	Delay time.Duration
	// Retry is nil for the server's default policy.
	Retry *tikkv1.RetryPolicy
	// StartTimeout, when not zero, dead-letters an attempt no worker started this long after
	// it was due.
	StartTimeout time.Duration
	// ExecutionTimeout, when not zero (1 s to a day), is how long one run may take; the
	// worker stops a longer run. It replaces the handler's own timeout.
	ExecutionTimeout time.Duration
}

func (c *Client) request(s TaskSpec) *tikkv1.CreateTaskRequest {
	req := &tikkv1.CreateTaskRequest{
		Namespace: c.namespace, TaskId: s.ID, Queue: s.Queue, Handler: s.Handler,
		Payload: s.Payload, Labels: s.Labels, RetryPolicy: s.Retry,
	}
	switch {
	case !s.RunAt.IsZero():
		req.When = &tikkv1.CreateTaskRequest_RunAt{RunAt: timestamppb.New(s.RunAt)}
	case s.Delay != 0:
		req.When = &tikkv1.CreateTaskRequest_Delay{Delay: durationpb.New(s.Delay)}
	}
	if s.StartTimeout != 0 {
		req.StartTimeout = durationpb.New(s.StartTimeout)
	}
	if s.ExecutionTimeout != 0 {
		req.ExecutionTimeout = durationpb.New(s.ExecutionTimeout)
	}
	return req
}

// CreateTask creates a task. created is false when a task with the same ID and content
// existed already (see TaskSpec.ID): sending a create again is safe when it has an ID.
func (c *Client) CreateTask(ctx context.Context, spec TaskSpec) (task *tikkv1.Task, created bool, err error) {
	resp, err := c.tasks.CreateTask(ctx, c.request(spec))
	if err != nil {
		return nil, false, err
	}
	return resp.GetTask(), resp.GetCreated(), nil
}

// GetTask returns the task with this id; codes.NotFound if there is none.
func (c *Client) GetTask(ctx context.Context, id string) (*tikkv1.Task, error) {
	return c.tasks.GetTask(ctx, &tikkv1.GetTaskRequest{Namespace: c.namespace, TaskId: id})
}

// CancelTask cancels a task that was not dispatched yet (cancelling a cancelled task is a
// no-op); codes.FailedPrecondition once it was dispatched or finished.
func (c *Client) CancelTask(ctx context.Context, id string) (*tikkv1.Task, error) {
	return c.tasks.CancelTask(ctx, &tikkv1.CancelTaskRequest{Namespace: c.namespace, TaskId: id})
}

// StopTask cancels a task as CancelTask does, and one already dispatched too: its attempt
// ends CANCELLED at once and its worker is told to stop the run (stop_running).
func (c *Client) StopTask(ctx context.Context, id string) (*tikkv1.Task, error) {
	return c.tasks.CancelTask(ctx, &tikkv1.CancelTaskRequest{
		Namespace: c.namespace, TaskId: id, StopRunning: true,
	})
}

// TaskQuery selects the tasks of ListTasks and Tasks.
type TaskQuery struct {
	// Queue is required unless LabelSelector is given.
	Queue string
	// State zero (TASK_STATE_UNSPECIFIED) lists every state.
	State tikkv1.TaskState
	// LabelSelector, e.g. "team=a,region!=eu".
	LabelSelector string
	// PageSize is 1..1000; 0 means the server's 100.
	PageSize int32
}

// ListTasks returns one page of tasks, from pageToken ("" for the first), and the token of
// the next page ("" after the last; with a label selector a page may be short, even empty,
// before it).
func (c *Client) ListTasks(ctx context.Context, q TaskQuery, pageToken string) (tasks []*tikkv1.Task, next string, err error) {
	resp, err := c.tasks.ListTasks(ctx, &tikkv1.ListTasksRequest{
		Namespace: c.namespace, Queue: q.Queue, State: q.State, PageSize: q.PageSize,
		PageToken: pageToken, LabelSelector: q.LabelSelector,
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetTasks(), resp.GetNextPageToken(), nil
}

// Tasks yields every task of the query, fetching the pages as the loop reaches them; a
// failed page is yielded as an error and ends the iteration.
func (c *Client) Tasks(ctx context.Context, q TaskQuery) iter.Seq2[*tikkv1.Task, error] {
	return func(yield func(*tikkv1.Task, error) bool) {
		token := ""
		for {
			page, next, err := c.ListTasks(ctx, q, token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, t := range page {
				if !yield(t, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			token = next
		}
	}
}
