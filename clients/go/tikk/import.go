package tikk

import (
	"context"
	"fmt"
	"io"
	"iter"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// ImportOptions are the batching of ImportTasks. Zero values take the defaults.
type ImportOptions struct {
	// BatchSize is the number of tasks per batch (default 1000; the server refuses a batch
	// over its limit, 5000 by default, whole).
	BatchSize int
	// Window is the number of batches sent and not yet answered (default 4): the server
	// works on a few batches of a stream at once, and the client reads its input no faster
	// than the server answers.
	Window int
}

// ImportResult is the outcome of one task of an import.
type ImportResult struct {
	// Index is the task's position in the input, counting from 0.
	Index int64
	// TaskID is the task's id (the server's, when the spec had none).
	TaskID string
	// Created is false for a task that existed already (same ID and content).
	Created bool
	// Err is nil when the task was accepted, else a status error (status.Code gives e.g.
	// codes.InvalidArgument, codes.AlreadyExists or codes.ResourceExhausted).
	Err error
}

// ImportInterruptedError ends an import whose stream broke. The tasks before NextIndex were
// answered; an import resumed from there creates nothing twice if every task has an ID.
// It wraps the stream's status error: status.Code(err) is the stream's code.
type ImportInterruptedError struct {
	NextIndex int64
	Err       error
}

func (e *ImportInterruptedError) Error() string {
	return fmt.Sprintf("tikk: import interrupted at task %d: %v", e.NextIndex, e.Err)
}

func (e *ImportInterruptedError) Unwrap() error { return e.Err }

// ImportTasks streams tasks to the server (ImportTasks, a bidirectional stream) and yields
// one result per task, in input order. The tasks are cut into batches of BatchSize, and at
// most Window batches are unanswered at any time: the input is read only as fast as the
// server makes batches durable, so an input of any length is never held whole. A broken
// stream is yielded last, as an *ImportInterruptedError. Stopping the loop early ends the
// stream (batches already sent may still be stored).
func (c *Client) ImportTasks(ctx context.Context, tasks iter.Seq[TaskSpec], opt ImportOptions) iter.Seq2[ImportResult, error] {
	size, window := opt.BatchSize, opt.Window
	if size <= 0 {
		size = 1000
	}
	if window <= 0 {
		window = 4
	}
	return func(yield func(ImportResult, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.tasks.ImportTasks(ctx)
		if err != nil {
			yield(ImportResult{}, &ImportInterruptedError{Err: err})
			return
		}
		f := &feeder{client: c, stream: stream, size: size,
			slots: make(chan struct{}, window), sent: make(chan sentBatch, window)}
		fed := make(chan struct{})
		go func() { defer close(fed); f.feed(ctx, tasks) }()
		defer func() { cancel(); <-fed }()
		var next int64
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				if b, open := <-f.sent; open {
					err = status.Errorf(codes.Internal, "the stream ended with batch %d unanswered", b.first)
					yield(ImportResult{}, &ImportInterruptedError{NextIndex: next, Err: err})
				}
				return
			}
			if err != nil {
				yield(ImportResult{}, &ImportInterruptedError{NextIndex: next, Err: err})
				return
			}
			batch := <-f.sent // registered before it was sent: the server answers in order
			<-f.slots
			results, err := batch.results(resp)
			if err != nil {
				yield(ImportResult{}, &ImportInterruptedError{NextIndex: next, Err: err})
				return
			}
			next += int64(len(batch.ids))
			for _, r := range results {
				if !yield(r, nil) {
					return
				}
			}
		}
	}
}

type sentBatch struct {
	first int64
	ids   []string
}

func (b sentBatch) results(resp *tikkv1.ImportTasksResponse) ([]ImportResult, error) {
	if resp.GetBatchId() != b.first || (resp.GetCode() == 0 && len(resp.GetResults()) != len(b.ids)) {
		return nil, status.Errorf(codes.Internal,
			"the server answered batch %d with %d results where batch %d of %d tasks was due",
			resp.GetBatchId(), len(resp.GetResults()), b.first, len(b.ids))
	}
	out := make([]ImportResult, 0, len(b.ids))
	if resp.GetCode() != 0 {
		refused := status.Error(codes.Code(resp.GetCode()), resp.GetMessage())
		for i, id := range b.ids {
			out = append(out, ImportResult{Index: b.first + int64(i), TaskID: id, Err: refused})
		}
		return out, nil
	}
	for _, r := range resp.GetResults() {
		var err error
		if r.GetCode() != 0 {
			err = status.Error(codes.Code(r.GetCode()), r.GetMessage())
		}
		out = append(out, ImportResult{Index: b.first + r.GetIndex(), TaskID: r.GetTaskId(), Created: r.GetCreated(), Err: err})
	}
	return out, nil
}

// feeder sends the batches of one import. slots holds a token per batch sent and not
// answered (Window of them at most); sent is the FIFO of those batches, which the receiving
// side pops as answers come.
type feeder struct {
	client *Client
	stream tikkv1.TaskService_ImportTasksClient
	size   int
	slots  chan struct{}
	sent   chan sentBatch
	index  int64
}

func (f *feeder) feed(ctx context.Context, tasks iter.Seq[TaskSpec]) {
	defer close(f.sent)
	chunk := make([]*tikkv1.CreateTaskRequest, 0, f.size)
	for spec := range tasks {
		chunk = append(chunk, f.client.request(spec))
		if len(chunk) == f.size {
			if !f.send(ctx, chunk) {
				return
			}
			chunk = make([]*tikkv1.CreateTaskRequest, 0, f.size)
		}
	}
	if len(chunk) > 0 && !f.send(ctx, chunk) {
		return
	}
	f.stream.CloseSend()
}

// send waits for a free slot and sends one batch; false when the import is over (the
// context ended, or the stream broke: its receiving side reports why).
func (f *feeder) send(ctx context.Context, chunk []*tikkv1.CreateTaskRequest) bool {
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	ids := make([]string, len(chunk))
	for i, t := range chunk {
		ids[i] = t.GetTaskId()
	}
	first := f.index
	f.index += int64(len(chunk))
	f.sent <- sentBatch{first: first, ids: ids}
	return f.stream.Send(&tikkv1.ImportTasksRequest{Tasks: chunk, BatchId: first}) == nil
}
