package tikk

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// ListTaskRuns returns one page of the runs of a task, newest first, from pageToken ("" for
// the first), and the token of the next page ("" after the last). pageSize 0 is the server's
// default.
func (c *Client) ListTaskRuns(ctx context.Context, taskID string, pageSize int32, pageToken string) (runs []*tikkv1.Run, next string, err error) {
	resp, err := c.history.ListTaskRuns(ctx, &tikkv1.ListTaskRunsRequest{
		Namespace: c.namespace, TaskId: taskID, PageSize: pageSize, PageToken: pageToken,
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetRuns(), resp.GetNextPageToken(), nil
}

// RunQuery selects the runs of ListRuns.
type RunQuery struct {
	// Queue is required.
	Queue string
	// Status zero (RUN_STATUS_UNSPECIFIED) matches every status.
	Status tikkv1.RunStatus
	// Runs the server recorded in [Start, End) (Run.record_time); a zero time leaves that
	// side open.
	Start, End time.Time
	PageSize   int32
}

// ListRuns returns one page of the runs of the client's namespace that match q, newest
// first, and the token of the next page ("" after the last).
func (c *Client) ListRuns(ctx context.Context, q RunQuery, pageToken string) (runs []*tikkv1.Run, next string, err error) {
	req := &tikkv1.ListRunsRequest{
		Namespace: c.namespace, Queue: q.Queue, Status: q.Status, PageSize: q.PageSize,
		PageToken: pageToken,
	}
	if !q.Start.IsZero() {
		req.StartTime = timestamppb.New(q.Start)
	}
	if !q.End.IsZero() {
		req.EndTime = timestamppb.New(q.End)
	}
	resp, err := c.history.ListRuns(ctx, req)
	if err != nil {
		return nil, "", err
	}
	return resp.GetRuns(), resp.GetNextPageToken(), nil
}
