package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaQueue is a parsed queue URL (tikk/queue_contract.py KafkaQueueUrl, with the login
// options of tikk/urls.py):
//
//	kafka://[user@]host:port[,host:port][?prefix=tikk.&partitions=8&replication=1
//	        &sasl=SCRAM-SHA-256&password_file=PATH|password_env=VAR&tls=1&tls_ca=PATH
//	        &tls_cert=PATH&tls_key=PATH]
type kafkaQueue struct {
	brokers     []string
	prefix      string
	partitions  int32
	replication int16
	login       []kgo.Opt // SASL and TLS
}

func (k *kafkaQueue) topic(queue string) string { return k.prefix + queue }

// group is one per queue, not per worker: workers of [a, b] and of [a] must split a.
func (k *kafkaQueue) group(queue string) string { return k.prefix + "workers." + queue }

func parseKafkaURL(raw string) (*kafkaQueue, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "kafka" || u.Host == "" {
		return nil, fmt.Errorf("queue URL: expected kafka://host:port[,host:port][?...] (this worker has no local:// consumer)")
	}
	q := u.Query()
	k := &kafkaQueue{brokers: strings.Split(u.Host, ","), prefix: "tikk.", partitions: 8, replication: 1}
	if q.Has("prefix") {
		k.prefix = q.Get("prefix")
	}
	if n, err := strconv.Atoi(q.Get("partitions")); err == nil {
		k.partitions = int32(n)
	}
	if n, err := strconv.Atoi(q.Get("replication")); err == nil {
		k.replication = int16(n)
	}
	if u.User != nil {
		mechanism, err := saslLogin(u.User, q)
		if err != nil {
			return nil, err
		}
		k.login = append(k.login, kgo.SASL(mechanism))
	}
	if q.Get("tls_ca") != "" || q.Get("tls_cert") != "" || isTrue(q.Get("tls")) {
		config, err := tlsConfig(q)
		if err != nil {
			return nil, err
		}
		// franz-go checks each broker's certificate for the host it dials.
		k.login = append(k.login, kgo.DialTLSConfig(config))
	}
	return k, nil
}

// saslLogin is the URL's user with its password (inline, password_file or password_env).
func saslLogin(user *url.Userinfo, q url.Values) (sasl.Mechanism, error) {
	password, inline := user.Password()
	switch {
	case inline:
	case q.Get("password_file") != "":
		data, err := os.ReadFile(q.Get("password_file"))
		if err != nil {
			return nil, fmt.Errorf("queue URL: %w", err)
		}
		password, _, _ = strings.Cut(string(data), "\n")
	case q.Get("password_env") != "":
		password = os.Getenv(q.Get("password_env"))
	}
	name := user.Username()
	switch q.Get("sasl") {
	case "", "SCRAM-SHA-256": // tikk's default when a user is given
		return scram.Auth{User: name, Pass: password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: name, Pass: password}.AsSha512Mechanism(), nil
	case "PLAIN":
		return plain.Auth{User: name, Pass: password}.AsMechanism(), nil
	}
	return nil, fmt.Errorf("queue URL: unknown sasl mechanism %q", q.Get("sasl"))
}

func tlsConfig(q url.Values) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca := q.Get("tls_ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("queue URL: %w", err)
		}
		config.RootCAs = x509.NewCertPool()
		if !config.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("queue URL: no certificate in %s", ca)
		}
	}
	if cert := q.Get("tls_cert"); cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, q.Get("tls_key"))
		if err != nil {
			return nil, fmt.Errorf("queue URL: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

func isTrue(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// consumer joins queue's group on its topic, creating the topic if it is missing (either
// side of the queue may, tikk/drivers/kafka.py), which also proves the login at start.
func (k *kafkaQueue) consumer(ctx context.Context, queue string) (*kgo.Client, error) {
	options := append([]kgo.Opt{
		kgo.SeedBrokers(k.brokers...),
		kgo.ConsumerGroup(k.group(queue)),
		kgo.ConsumeTopics(k.topic(queue)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group reads from the start
		kgo.DisableAutoCommit(),                           // commits follow acknowledgements
		kgo.BlockRebalanceOnPoll(),                        // see consume in main.go
		kgo.SessionTimeout(6 * time.Second),               // as the Python worker's defaults
		kgo.HeartbeatInterval(time.Second),
	}, k.login...)
	client, err := kgo.NewClient(options...)
	if err != nil {
		return nil, err
	}
	if err := k.createTopic(ctx, client, k.topic(queue)); err != nil {
		client.Close()
		return nil, fmt.Errorf("kafka: creating topic %s: %w", k.topic(queue), err)
	}
	return client, nil
}

func (k *kafkaQueue) createTopic(ctx context.Context, client *kgo.Client, topic string) error {
	request := kmsg.NewPtrCreateTopicsRequest()
	request.TimeoutMillis = 15_000
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, k.partitions, k.replication
	request.Topics = append(request.Topics, t)
	call, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	response, err := request.RequestWith(call, client)
	if err != nil {
		return err
	}
	for _, t := range response.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
	}
	return nil
}
