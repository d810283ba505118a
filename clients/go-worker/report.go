package main

import (
	"context"
	"log"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// reporter holds the one ReportResultBatches call of the worker. Exchanges go lock-step:
// a batch is sent and its ResultAckBatch read back before the next batch goes out (with
// one batch in flight, its answer is the next one read), so a mutex is all the bookkeeping
// needed.
// The Python SDK pipelines batches instead; this is slower but short.
type reporter struct {
	client tikkv1.WorkerServiceClient
	ctx    context.Context // the worker's: ending it ends the call
	mu     sync.Mutex
	stream tikkv1.WorkerService_ReportResultBatchesClient
	cancel context.CancelFunc
}

// exchange sends one batch and returns its acknowledgements. A call that failed is dropped;
// the next exchange opens a new one.
func (r *reporter) exchange(results []*tikkv1.RunResult) ([]*tikkv1.ResultAck, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stream == nil {
		ctx, cancel := context.WithCancel(r.ctx)
		// Wait for a server that is away rather than fail at once.
		stream, err := r.client.ReportResultBatches(ctx, grpc.WaitForReady(true))
		if err != nil {
			cancel()
			return nil, err
		}
		r.stream, r.cancel = stream, cancel
	}
	err := r.stream.Send(&tikkv1.RunResultBatch{Results: results})
	if err == nil {
		var answer *tikkv1.ResultAckBatch
		if answer, err = r.stream.Recv(); err == nil {
			return answer.GetAcks(), nil
		}
	}
	r.cancel()
	r.stream = nil
	return nil, err
}

// settle reports results until each one is recorded or refused for good, and returns each
// run's final code. A lost call or a retriable code means "send the same result again":
// the server records a run once however often it comes (same run id). Errs only when the
// worker is stopping.
func (r *reporter) settle(results []*tikkv1.RunResult) (map[string]codes.Code, error) {
	final := make(map[string]codes.Code, len(results))
	delay := 50 * time.Millisecond
	for len(results) > 0 {
		acks, err := r.exchange(results)
		if err != nil {
			if r.ctx.Err() != nil {
				return final, r.ctx.Err()
			}
			log.Printf("go-worker: result stream lost (%v); sending %d result(s) again", err, len(results))
			sleep(r.ctx, delay)
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 50 * time.Millisecond
		byRun := make(map[string]*tikkv1.ResultAck, len(acks))
		for _, ack := range acks {
			byRun[ack.GetRunId()] = ack
		}
		var again []*tikkv1.RunResult
		for _, result := range results {
			ack := byRun[result.GetRunId()]
			switch code := codes.Code(ack.GetCode()); {
			case ack == nil:
				again = append(again, result)
			case code == codes.OK:
				final[result.RunId] = code
			case code == codes.PermissionDenied || code == codes.FailedPrecondition:
				// Final (worker.proto, ResultAck): the token does not match, or the task is
				// not at that attempt any more. The message is dropped.
				final[result.RunId] = code
				log.Printf("go-worker: result of task %s attempt %d refused for good (%s): %s",
					result.Delivery.GetTaskId(), result.Delivery.GetAttempt(), code, ack.GetMessage())
			default: // UNAVAILABLE and the rest: keep the message, report again
				log.Printf("go-worker: result %s not recorded (%s: %s); reporting again", result.RunId, code, ack.GetMessage())
				again = append(again, result)
			}
		}
		results = again
		if len(again) > 0 && !sleep(r.ctx, time.Second) {
			return final, r.ctx.Err()
		}
	}
	return final, nil
}
