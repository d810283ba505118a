package tikk

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// CreateSchedule creates a recurring schedule in the client's namespace (the schedule's own
// namespace, if set, is replaced). An empty id is assigned by the server. The schedule is
// not modified; the one stored is returned, with its next fire time.
func (c *Client) CreateSchedule(ctx context.Context, schedule *tikkv1.Schedule) (*tikkv1.Schedule, error) {
	s := proto.Clone(schedule).(*tikkv1.Schedule)
	s.Namespace = c.namespace
	return c.schedules.CreateSchedule(ctx, &tikkv1.CreateScheduleRequest{Schedule: s})
}

// PreviewSchedule returns the next count occurrences (nominal and fire times, local wall
// time) of an existing schedule strictly after after (a zero time: now). count 0 is the
// server's default, 10.
func (c *Client) PreviewSchedule(ctx context.Context, scheduleID string, after time.Time, count int32) ([]*tikkv1.PreviewedOccurrence, error) {
	target := &tikkv1.PreviewScheduleRequest_Schedule{
		Schedule: &tikkv1.GetScheduleRequest{Namespace: c.namespace, ScheduleId: scheduleID},
	}
	return c.preview(ctx, &tikkv1.PreviewScheduleRequest{Target: target, Count: count}, after)
}

// PreviewSpec is PreviewSchedule for a spec not created yet: when would it fire.
func (c *Client) PreviewSpec(ctx context.Context, spec *tikkv1.ScheduleSpec, after time.Time, count int32) ([]*tikkv1.PreviewedOccurrence, error) {
	target := &tikkv1.PreviewScheduleRequest_Spec{Spec: spec}
	return c.preview(ctx, &tikkv1.PreviewScheduleRequest{Target: target, Count: count}, after)
}

func (c *Client) preview(ctx context.Context, req *tikkv1.PreviewScheduleRequest, after time.Time) ([]*tikkv1.PreviewedOccurrence, error) {
	if !after.IsZero() {
		req.AfterTime = timestamppb.New(after)
	}
	resp, err := c.schedules.PreviewSchedule(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetOccurrences(), nil
}
