package tikk

// Tests that need no tikk server: addresses, options, and the flow control of ImportTasks
// against an in-process server that reads every batch as soon as it arrives.

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:7070": true, "[::1]:7070": true,
		"unix:/tmp/tikk.sock": true, "10.0.0.1:7070": false, "tikk.example:7070": false,
		":7070": false, "localhost.evil:7070": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestATokenGoesInClearOnlyToLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := Dial(ctx, "10.0.0.1:7070", WithToken("secret")); err == nil {
		t.Fatal("a token over plaintext to another host was accepted")
	}
	o := options{token: "secret"}
	if _, err := o.dialOptions(mustServers(t, "127.0.0.1:7070")); err != nil {
		t.Fatalf("a token over plaintext to loopback was refused: %v", err)
	}
}

func mustServers(t *testing.T, addr string) servers {
	t.Helper()
	s, err := parseServers(addr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAnUnreachableServerIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, addr)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Dial to nothing: %v, want codes.Unavailable", err)
	}
}

// slowImporter answers each batch of an ImportTasks stream after a pause, reading the
// batches as fast as they come, and records the most batches it had read and not answered.
type slowImporter struct {
	tikkv1.UnimplementedTaskServiceServer
	mu                      sync.Mutex
	unanswered, most, tasks int
}

func (s *slowImporter) ImportTasks(stream tikkv1.TaskService_ImportTasksServer) error {
	read := make(chan *tikkv1.ImportTasksRequest, 1000)
	go func() {
		defer close(read)
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.unanswered++
			s.most = max(s.most, s.unanswered)
			s.tasks += len(req.GetTasks())
			s.mu.Unlock()
			read <- req
		}
	}()
	for req := range read {
		time.Sleep(20 * time.Millisecond)
		resp := &tikkv1.ImportTasksResponse{BatchId: req.GetBatchId()}
		for i, task := range req.GetTasks() {
			resp.Results = append(resp.Results, &tikkv1.CreateTasksItemResult{
				Index: int64(i), TaskId: task.GetTaskId(), Created: true,
			})
		}
		if req.GetBatchId() == 0 { // one refused task, to see a per-task status
			resp.Results[1].Code, resp.Results[1].Message = int32(codes.InvalidArgument), "no"
		}
		s.mu.Lock()
		s.unanswered--
		s.mu.Unlock()
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

func numbered(n int) iter.Seq[TaskSpec] {
	return func(yield func(TaskSpec) bool) {
		for i := range n {
			if !yield(TaskSpec{ID: fmt.Sprintf("t-%d", i), Queue: "q", Handler: "h"}) {
				return
			}
		}
	}
}

func TestImportKeepsAtMostWindowBatchesUnanswered(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	importer := &slowImporter{}
	tikkv1.RegisterTaskServiceServer(server, importer)
	go server.Serve(l)
	defer server.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var got int64
	for r, err := range c.ImportTasks(ctx, numbered(1000), ImportOptions{BatchSize: 10, Window: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.Index != got || r.TaskID != fmt.Sprintf("t-%d", got) {
			t.Fatalf("result %d is for task %d (%s)", got, r.Index, r.TaskID)
		}
		if refused := r.Index == 1; refused != (status.Code(r.Err) == codes.InvalidArgument) {
			t.Fatalf("task %d: %v", r.Index, r.Err)
		}
		got++
	}
	if got != 1000 || importer.tasks != 1000 {
		t.Fatalf("%d results, %d tasks read by the server, want 1000", got, importer.tasks)
	}
	if importer.most > 3 || importer.most < 2 {
		t.Fatalf("the server held %d batches unanswered at once, want 2 or 3 (the window)", importer.most)
	}
}

func TestStoppingAnImportEarlyEndsItsStream(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	tikkv1.RegisterTaskServiceServer(server, &slowImporter{})
	go server.Serve(l)
	defer server.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := 0
	for _, err := range c.ImportTasks(ctx, numbered(1_000_000), ImportOptions{BatchSize: 100}) {
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if seen++; seen == 250 {
			break // the feeder must end with the loop, not read the million tasks
		}
	}
}
