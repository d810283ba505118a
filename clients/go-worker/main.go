// Command go-worker is a minimal tikk worker in Go, an example of docs/worker-protocol.md:
// it asks the server where the queue is (GetWorkerConfig), consumes deliveries from Kafka,
// runs a handler for each, reports the results on ReportResultBatches echoing the delivery,
// and commits the Kafka offsets only once the server acknowledged the results.
//
// Handlers: "echo" returns the payload as output; "fail" fails (the server retries it per
// the task's policy, then dead-letters it); any other name fails permanently.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// failure is a handler error with the type the run history shows (Python's exception class).
type failure struct{ Type, Message string }

func (f failure) Error() string { return f.Type + ": " + f.Message }

// handlers maps Delivery.handler to code. An error fails the run (kind FAILED: retried).
var handlers = map[string]func(payload []byte) ([]byte, error){
	"echo": func(p []byte) ([]byte, error) { return p, nil },
	"fail": func(p []byte) ([]byte, error) {
		return nil, failure{"DeliberateFailure", fmt.Sprintf("asked to fail (payload %q)", p)}
	},
}

// The server's caps on a result (tikk/settings.py Limits): a result over one is refused
// whole, so what a run produces is made to fit before it is sent.
const (
	maxOutput       = 64 * 1024
	maxErrorMessage = 4096
	batchSize       = 64 // records per poll, hence results per RunResultBatch
	// How long a stopping worker may take to report and commit the poll in hand.
	shutdownGrace = 15 * time.Second
)

func main() {
	hostname, _ := os.Hostname()
	server := flag.String("server", env("TIKK_SERVER", "127.0.0.1:50051"), "tikk server address (host:port), a comma-separated list of them, or dns:///NAME:PORT")
	queues := flag.String("queues", env("TIKK_QUEUES", "default"), "comma-separated queues to work on")
	queueURL := flag.String("queue-url", os.Getenv("TIKK_QUEUE_URL"), "replaces the queue URL the server hands out (e.g. to name this host's password file)")
	workerID := flag.String("worker-id", fmt.Sprintf("go-%s-%d", hostname, os.Getpid()), "worker id recorded with each run")
	tokenFile := flag.String("token-file", "", "file holding the bearer token (default: $TIKK_TOKEN)")
	tlsCA := flag.String("tls-ca", "", "CA (PEM) of the server's certificate; turns TLS on")
	tlsName := flag.String("tls-server-name", "", "name to check the server's certificate for")
	flag.Parse()

	token, err := readToken(*tokenFile)
	if err != nil {
		log.Fatalf("go-worker: %v", err)
	}
	conn, err := dial(*server, *tlsCA, *tlsName, token)
	if err != nil {
		log.Fatalf("go-worker: %v", err)
	}
	defer conn.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, tikkv1.NewWorkerServiceClient(conn), *queueURL, *workerID, strings.Split(*queues, ",")); err != nil {
		log.Fatalf("go-worker: %v", err)
	}
}

func run(ctx context.Context, client tikkv1.WorkerServiceClient, queueURL, workerID string, queues []string) error {
	config, err := workerConfig(ctx, client)
	if err != nil {
		return err
	}
	if queueURL == "" {
		queueURL = config.GetQueueUrl()
	}
	kafka, err := parseKafkaURL(queueURL)
	if err != nil {
		return err
	}
	// A stop (SIGINT, SIGTERM) ends polling at once, but the poll in hand is still reported
	// and committed, for up to shutdownGrace: otherwise all of it would run again elsewhere.
	finishing, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	context.AfterFunc(ctx, func() { time.AfterFunc(shutdownGrace, cancel) })
	rep := &reporter{client: client, ctx: finishing}
	clock := newServerClock(config)
	var wg sync.WaitGroup
	for _, queue := range queues {
		// One Kafka consumer per queue: each queue is a consumer group of its own.
		consumer, err := kafka.consumer(ctx, queue)
		if err != nil {
			return err
		}
		log.Printf("go-worker %s consuming queue %s (topic %s, group %s)", workerID, queue, kafka.topic(queue), kafka.group(queue))
		wg.Add(1)
		go func() {
			defer wg.Done()
			consume(ctx, finishing, consumer, rep, clock, workerID)
		}()
	}
	wg.Wait()
	return nil
}

// workerConfig asks until the server answers: a worker may start before its server.
func workerConfig(ctx context.Context, client tikkv1.WorkerServiceClient) (*tikkv1.GetWorkerConfigResponse, error) {
	delay := 200 * time.Millisecond
	for {
		call, cancel := context.WithTimeout(ctx, 10*time.Second)
		config, err := client.GetWorkerConfig(call, &tikkv1.GetWorkerConfigRequest{})
		cancel()
		if err == nil {
			return config, nil
		}
		log.Printf("go-worker: GetWorkerConfig: %v; asking again in %v", err, delay)
		if !sleep(ctx, delay) {
			return nil, ctx.Err()
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// consume runs one queue's loop: poll, run, report, commit. Rebalances are held off from a
// poll until its records are committed (BlockRebalanceOnPoll), so a commit always lands on
// partitions this worker still owns; and the whole poll is settled before the next, so
// committing its newest offsets never passes an unfinished message. ctx ends polling;
// finishing ends the reporting and committing of a poll (see run).
func consume(ctx, finishing context.Context, consumer *kgo.Client, rep *reporter, clock serverClock, workerID string) {
	defer consumer.Close() // leaves the group: what is uncommitted goes to other workers
	defer consumer.AllowRebalance()
	for ctx.Err() == nil {
		fetches := consumer.PollRecords(ctx, batchSize)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			log.Printf("go-worker: fetching %s: %v", errs[0].Topic, errs[0].Err)
			sleep(ctx, time.Second)
		}
		records := fetches.Records()
		if len(records) > 0 {
			if err := work(rep, clock, workerID, records); err != nil {
				return // out of time while stopping: uncommitted, the messages come back later
			}
			// Only now: every result was acknowledged, or refused for good (a refused
			// message is dropped, since reporting it again cannot change the answer).
			if err := consumer.CommitRecords(finishing, records...); err != nil {
				log.Printf("go-worker: commit failed (%v): those messages will run again", err)
			}
		}
		consumer.AllowRebalance()
	}
}

// work runs the records' deliveries, each once it is due by the server's clock, and reports
// their results until settled.
func work(rep *reporter, clock serverClock, workerID string, records []*kgo.Record) error {
	values := make([][]byte, len(records))
	for i, record := range records {
		values[i] = record.Value
	}
	var results []*tikkv1.RunResult
	for _, delivery := range byDueTime(values) {
		if !clock.untilDue(rep.ctx, delivery) {
			return rep.ctx.Err() // stopping: uncommitted, the messages come back later
		}
		if delivery.GetStartTimeout() != nil {
			may, err := claimStart(rep, workerID, delivery)
			if err != nil {
				return err
			}
			if !may {
				continue // its start timeout ran out: dead-lettered, must not run
			}
		}
		results = append(results, execute(delivery, workerID))
	}
	_, err := rep.settle(results)
	return err
}

// claimStart asks the server whether an attempt with a start timeout may still start.
func claimStart(rep *reporter, workerID string, d *tikkv1.Delivery) (bool, error) {
	claim := &tikkv1.RunResult{
		RunId: newRunID(), Delivery: d, Kind: tikkv1.ResultKind_RESULT_KIND_STARTED,
		WorkerId: workerID, StartTime: timestamppb.Now(),
	}
	codes, err := rep.settle([]*tikkv1.RunResult{claim})
	return err == nil && codes[claim.RunId] == 0, err
}

// execute runs the delivery's handler and builds its result. The delivery goes back exactly
// as it came (its token signs it); the run id is fresh, and is kept if it is reported again.
func execute(d *tikkv1.Delivery, workerID string) *tikkv1.RunResult {
	result := &tikkv1.RunResult{RunId: newRunID(), Delivery: d, WorkerId: workerID, StartTime: timestamppb.Now()}
	handler, found := handlers[d.GetHandler()]
	var output []byte
	var err error
	if found {
		output, err = handler(d.GetPayload())
	}
	var f failure
	switch {
	case !found:
		result.Kind = tikkv1.ResultKind_RESULT_KIND_FAILED_PERMANENTLY // no retry would find one
		result.ErrorType = "UnknownHandler"
		result.ErrorMessage = fmt.Sprintf("no handler %q on worker %s (registered: echo, fail)", d.GetHandler(), workerID)
	case err == nil && len(output) > maxOutput:
		result.Kind = tikkv1.ResultKind_RESULT_KIND_FAILED
		result.ErrorType, result.ErrorMessage = "OutputTooLarge", fmt.Sprintf("%d bytes of output; at most %d", len(output), maxOutput)
	case err == nil:
		result.Kind, result.Output = tikkv1.ResultKind_RESULT_KIND_SUCCEEDED, output
	case errors.As(err, &f):
		result.Kind, result.ErrorType, result.ErrorMessage = tikkv1.ResultKind_RESULT_KIND_FAILED, f.Type, f.Message
	default:
		result.Kind, result.ErrorType, result.ErrorMessage = tikkv1.ResultKind_RESULT_KIND_FAILED, "Error", err.Error()
	}
	if len(result.ErrorMessage) > maxErrorMessage { // cut to fit, still valid UTF-8
		result.ErrorMessage = strings.ToValidUTF8(result.ErrorMessage[:maxErrorMessage], "")
	}
	result.FinishTime = timestamppb.Now()
	return result
}

// newRunID is 32 hex digits, like the Python SDK's.
func newRunID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// sleep waits d unless ctx ends first; false if it did.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
