package main

import (
	"context"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// serverClock is a lower bound of the server's clock: a delivery may arrive before its due
// time (the dispatcher's lead), and must not start before the server's clock reaches it,
// whatever this machine's clock says. GetWorkerConfig's server_time was stamped before its
// answer arrived, so the server's clock reads at least that plus the time since (measured on
// Go's monotonic clock). Without a server_time (an older server), this machine's clock.
type serverClock struct {
	server time.Time // the server's time in the answer
	at     time.Time // when the answer was in hand (with a monotonic reading)
}

func newServerClock(config *tikkv1.GetWorkerConfigResponse) serverClock {
	if config.GetServerTime() == nil {
		return serverClock{}
	}
	return serverClock{server: config.GetServerTime().AsTime(), at: time.Now()}
}

func (c serverClock) now() time.Time {
	if c.at.IsZero() {
		return time.Now()
	}
	return c.server.Add(time.Since(c.at))
}

// untilDue sleeps until the server's clock reaches the delivery's due time; false if ctx
// ended first.
func (c serverClock) untilDue(ctx context.Context, d *tikkv1.Delivery) bool {
	for {
		wait := d.GetDueTime().AsTime().Sub(c.now())
		if wait <= 0 {
			return true
		}
		if !sleep(ctx, wait) {
			return false
		}
	}
}

// byDueTime parses the records' deliveries and puts them in due order (a poll's records
// are run one after another, each at its due time). A record that is not a delivery comes
// first, empty: its report is refused (no token) and it is dropped.
func byDueTime(values [][]byte) []*tikkv1.Delivery {
	deliveries := make([]*tikkv1.Delivery, len(values))
	for i, value := range values {
		deliveries[i] = &tikkv1.Delivery{}
		if err := proto.Unmarshal(value, deliveries[i]); err != nil {
			deliveries[i].Reset()
		}
	}
	sort.SliceStable(deliveries, func(i, j int) bool {
		return deliveries[i].GetDueTime().AsTime().Before(deliveries[j].GetDueTime().AsTime())
	})
	return deliveries
}
