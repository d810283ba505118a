package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The names must be the Python side's (tikk/queue_contract.py KafkaQueueUrl), or the worker
// would consume nothing.
func TestQueueURLNamesTopicsAndGroupsAsTikkDoes(t *testing.T) {
	k, err := parseKafkaURL("kafka://b1:9092,b2:9092?prefix=e2e.&partitions=4&replication=3")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(k.brokers, []string{"b1:9092", "b2:9092"}) || k.partitions != 4 || k.replication != 3 {
		t.Fatalf("parsed %+v", k)
	}
	if k.topic("emails") != "e2e.emails" || k.group("emails") != "e2e.workers.emails" {
		t.Fatalf("topic %q, group %q", k.topic("emails"), k.group("emails"))
	}
	if d, _ := parseKafkaURL("kafka://b1:9092"); d.prefix != "tikk." || d.partitions != 8 || len(d.login) != 0 {
		t.Fatalf("defaults %+v", d)
	}
}

func TestQueueURLLogsInWithThePasswordFileAndCA(t *testing.T) {
	dir := t.TempDir()
	password := filepath.Join(dir, "kafka.password")
	if err := os.WriteFile(password, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := parseKafkaURL("kafka://tikk@b1:9092?sasl=SCRAM-SHA-512&password_file=" + password)
	if err != nil || len(k.login) != 1 { // SASL, no TLS
		t.Fatalf("login %v, err %v", k, err)
	}
	for _, bad := range []string{
		"local:///var/lib/tikk/queue.db",                          // no local consumer here
		"kafka://tikk@b1:9092?sasl=GSSAPI",                        // not a tikk mechanism
		"kafka://b1:9092?tls_ca=" + filepath.Join(dir, "missing"), // unreadable CA
	} {
		if _, err := parseKafkaURL(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
