package tikk

// A test against two real tikk servers on one data directory: TIKK_FAILOVER_ADDR names both
// ("127.0.0.1:P1,127.0.0.1:P2") and TIKK_FAILOVER_PIDS their processes, which this test
// pauses and kills. Without them it skips; tests/e2e/test_go_client.py starts the servers.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inFlight is how many calls of each kind are sent while one of the servers is paused: round
// robin gives it every other one.
const inFlight = 8

// TestFailoverBetweenTwoRealServers sends creates with and without a task ID, cancels and
// reads while the second server is paused, then kills it: every call but the creates without
// an ID is answered by the first server, each task stored once; a create without an ID that
// was on the killed server is Unavailable and not sent again (nor stored).
func TestFailoverBetweenTwoRealServers(t *testing.T) {
	addr, pids := os.Getenv("TIKK_FAILOVER_ADDR"), strings.Split(os.Getenv("TIKK_FAILOVER_PIDS"), ",")
	if addr == "" || len(pids) != 2 {
		t.Skip("TIKK_FAILOVER_ADDR and TIKK_FAILOVER_PIDS are not set: no two servers to test against")
	}
	victim, err := strconv.Atoi(pids[1])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, WithNamespace("go-failover"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	warm(ctx, t, c)
	for i := range inFlight {
		if _, _, err := c.CreateTask(ctx, later(fmt.Sprintf("to-cancel-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	results := sendInFlight(ctx, c, func() {
		time.Sleep(time.Second) // the calls wait on the paused server meanwhile
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Error(err)
		}
	})
	lost := 0
	for name, err := range results {
		if strings.HasPrefix(name, "without-id") && status.Code(err) == codes.Unavailable {
			lost++
		} else if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if lost == 0 {
		t.Fatal("no create without an ID was on the killed server: nothing shows it is not repeated")
	}
	checkStoredOnce(ctx, t, c, 2*inFlight+inFlight-lost)
}

// warm makes a few reads, so that the client has connected to both servers.
func warm(ctx context.Context, t *testing.T, c *Client) {
	for range 6 {
		if _, err := c.GetTask(ctx, "warm-up"); status.Code(err) != codes.NotFound {
			t.Fatalf("warming up: %v", err)
		}
	}
}

// sendInFlight sends the calls all at once, runs fault, and waits for every call to end.
func sendInFlight(ctx context.Context, c *Client, fault func()) map[string]error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	results := map[string]error{}
	send := func(name string, call func() error) {
		wg.Go(func() {
			err := call()
			mu.Lock()
			defer mu.Unlock()
			results[name] = err
		})
	}
	for i := range inFlight {
		round := []func(){
			func() {
				send(fmt.Sprintf("with-id-%d", i), func() error {
					_, _, err := c.CreateTask(ctx, later(fmt.Sprintf("with-id-%d", i)))
					return err
				})
			},
			func() {
				send(fmt.Sprintf("without-id-%d", i), func() error {
					_, _, err := c.CreateTask(ctx, later(""))
					return err
				})
			},
			func() {
				send(fmt.Sprintf("cancel-%d", i), func() error {
					_, err := c.CancelTask(ctx, fmt.Sprintf("to-cancel-%d", i))
					return err
				})
			},
			func() {
				send(fmt.Sprintf("get-%d", i), func() error {
					_, err := c.GetTask(ctx, fmt.Sprintf("to-cancel-%d", i))
					return err
				})
			},
		}
		// Round robin alternates strictly: every other round in another order, so that each
		// kind of call goes to both servers.
		if i%2 == 1 {
			round[0], round[1], round[2], round[3] = round[1], round[0], round[3], round[2]
		}
		for _, start := range round {
			start()
		}
	}
	fault()
	faulted := time.Now()
	wg.Wait()
	fmt.Printf("all calls settled %v after the fault\n", time.Since(faulted).Round(time.Millisecond))
	return results
}

// checkStoredOnce checks that the namespace holds want tasks, the to-cancel ones cancelled.
func checkStoredOnce(ctx context.Context, t *testing.T, c *Client, want int) {
	stored := 0
	for task, err := range c.Tasks(ctx, TaskQuery{Queue: "later"}) {
		if err != nil {
			t.Fatal(err)
		}
		stored++
		if strings.HasPrefix(task.GetId(), "to-cancel-") && task.GetState().String() != "TASK_STATE_CANCELLED" {
			t.Errorf("%s is %v, want cancelled", task.GetId(), task.GetState())
		}
	}
	if stored != want {
		t.Fatalf("%d tasks stored, want %d: each create with an ID once, and only the creates without one that were answered", stored, want)
	}
}
