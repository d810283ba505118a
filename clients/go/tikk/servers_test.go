package tikk

// Tests of the addresses that name several servers (servers.go), needing no server: the
// failover itself is tested against real servers (server_test.go, TestFailover...).

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

func TestOneAddressIsDialledAsGiven(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7070", "tikk.internal:7070", "[::1]:7070", "unix:/run/tikk.sock", ""} {
		s := mustServers(t, addr)
		if s.target != addr || s.balanced || len(s.dialOptions(true)) != 0 {
			t.Errorf("%q: %+v, want it dialled as given, nothing added", addr, s)
		}
	}
	if s := mustServers(t, "dns:///tikk.internal:7070"); !s.balanced || s.target != "dns:///tikk.internal:7070" {
		t.Errorf("a DNS name: %+v, want it balanced over what it resolves to", s)
	}
}

func TestAListOfAddressesIsBalanced(t *testing.T) {
	for addr, want := range map[string][]string{
		"10.0.0.1:7070,10.0.0.2:7070":         {"10.0.0.1:7070", "10.0.0.2:7070"},
		" 10.0.0.1:7070 , 10.0.0.2:7071":      {"10.0.0.1:7070", "10.0.0.2:7071"},
		"[fd00::1]:7070,[fd00::2]:7070":       {"[fd00::1]:7070", "[fd00::2]:7070"},
		"127.0.0.1:1,127.0.0.1:2,127.0.0.1:3": {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"},
	} {
		s := mustServers(t, addr)
		if !s.balanced || strings.Join(s.static, ",") != strings.Join(want, ",") {
			t.Errorf("%q: %+v, want the servers %v balanced", addr, s, want)
		}
	}
}

func TestAListGRPCCannotDialIsRefusedNamingTheEntry(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:1,,127.0.0.1:2":     `entry 2 "" is empty`,
		"127.0.0.1:1,":                 `entry 2 "" is empty`,
		"127.0.0.1:1,127.0.0.1":        `entry 2 "127.0.0.1" has no port`,
		"127.0.0.1:0,127.0.0.1:2":      `entry 1 "127.0.0.1:0" has port "0": a port is 1 to 65535`,
		"127.0.0.1:1,127.0.0.1:65536":  `entry 2 "127.0.0.1:65536" has port`,
		"127.0.0.1:1,127.0.0.1:http":   `entry 2 "127.0.0.1:http" has port`,
		"127.0.0.1:1,localhost:2":      `entry 2 "localhost:2" names a host`,
		"127.0.0.1:1,[::1]:2":          `entry 2 "[::1]:2" is an IPv6 address and entry 1 an IPv4 one`,
		"127.0.0.1:1,127.0.0.1:1":      `entry 2 "127.0.0.1:1" repeats entry 1`,
		"127.0.0.1:1,dns:///tikk:2":    `entry 2 "dns:///tikk:2" is a gRPC target of its own`,
		"unix:/a,unix:/b":              `entry 1 "unix:/a" is a gRPC target of its own`,
		"::1:7070,::1:7071":            `entry 1 "::1:7070" is an IPv6 address without brackets`,
		"[fe80::1%eth0]:1,[fe80::2]:1": `entry 1 "[fe80::1%eth0]:1" names a host`,
	} {
		_, err := parseServers(addr)
		if err == nil || !strings.Contains(err.Error(), "server list "+want) {
			t.Errorf("%q: %v, want an error with %q", addr, err, want)
		}
	}
}

func TestATokenGoesInClearOnlyToAListOfLoopbackServers(t *testing.T) {
	o := options{token: "secret"}
	if _, err := o.dialOptions(mustServers(t, "127.0.0.1:1,127.0.0.2:2")); err != nil {
		t.Fatalf("a token to loopback servers was refused: %v", err)
	}
	_, err := o.dialOptions(mustServers(t, "127.0.0.1:1,10.0.0.2:2"))
	if err == nil || !strings.Contains(err.Error(), "not to 10.0.0.2:2") {
		t.Fatalf("a token in clear to a list with another host: %v, want it refused naming the host", err)
	}
}

func TestTLSToSeveralHostsNeedsTheNameTheirCertificatesShare(t *testing.T) {
	o := options{tls: true}
	if _, err := o.dialOptions(mustServers(t, "10.0.0.1:7070,10.0.0.2:7070")); err == nil {
		t.Fatal("TLS to two hosts without a server name was accepted")
	}
	if _, err := o.dialOptions(mustServers(t, "10.0.0.1:7070,10.0.0.1:7071")); err != nil {
		t.Fatalf("TLS to one host on two ports: %v", err)
	}
	o.serverName = "tikk.internal"
	if _, err := o.dialOptions(mustServers(t, "10.0.0.1:7070,10.0.0.2:7070")); err != nil {
		t.Fatalf("TLS to two hosts with their certificates' name: %v", err)
	}
}

func TestOnlyCallsSafeToRepeatAreRepeated(t *testing.T) {
	for req, want := range map[any]bool{
		&tikkv1.CreateTaskRequest{TaskId: "mine"}:                              true,
		&tikkv1.CreateTaskRequest{}:                                            false,
		&tikkv1.CreateScheduleRequest{Schedule: &tikkv1.Schedule{Id: "daily"}}: true,
		&tikkv1.CreateScheduleRequest{Schedule: &tikkv1.Schedule{}}:            false,
		&tikkv1.GetTaskRequest{}:                                               true,
		&tikkv1.CancelTaskRequest{}:                                            true,
		&tikkv1.ListTasksRequest{}:                                             true,
		&tikkv1.ImportTasksRequest{}:                                           false,
	} {
		if got := safeToRepeat("", req); got != want {
			t.Errorf("safeToRepeat(%T %v) = %v, want %v", req, req, got, want)
		}
	}
	calls := 0
	unavailable := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return status.Error(codes.Unavailable, "gone")
	}
	repeat := repeatWhenSafe(3)
	for req, want := range map[any]int{&tikkv1.GetTaskRequest{}: 3, &tikkv1.CreateTaskRequest{}: 1} {
		calls = 0
		err := repeat(context.Background(), "", req, nil, nil, unavailable)
		if status.Code(err) != codes.Unavailable || calls != want {
			t.Errorf("%T: sent %d times (%v), want %d", req, calls, err, want)
		}
	}
}
