package tikk

// Several servers: the address given to Dial may name more than one, as in the Python client
// (tikk/client/server_list.py) and the CLI's --server:
//
//	127.0.0.1:7070                  one server, dialled exactly as gRPC dials any target
//	10.0.0.1:7070,10.0.0.2:7070     several: a static list, round_robin
//	[fd00::1]:7070,[fd00::2]:7070   the same over IPv6
//	dns:///tikk.internal:7070       every address the name resolves to, round_robin
//
// With several servers each call goes to the next server whose connection is ready, so calls
// spread and a server that is down is skipped; connections that carry calls are pinged so a
// server that hangs is left too; and a call that is safe to repeat (see safeToRepeat) and
// ends UNAVAILABLE, its server lost under it, is sent again, to another server.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

const roundRobin = `{"loadBalancingConfig": [{"round_robin": {}}]}`

// The schemes of gRPC targets, which a list's entries are not.
var targetSchemes = map[string]bool{
	"dns": true, "unix": true, "unix-abstract": true, "ipv4": true, "ipv6": true, "passthrough": true,
}

// The pings of a connection to one of several servers: gRPC-Go sends them at most every
// 10 s; tikk servers permit one every 4 s on a quiet call.
var pings = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}

// servers is what an address given to Dial names.
type servers struct {
	target    string   // what gRPC dials
	addresses []string // each server's host:port; the target itself for one address or a name
	balanced  bool     // several servers: round_robin, pings, repeats
	static    []string // a list's addresses, handed to gRPC by a resolver of the client's own
}

// parseServers reads addr; an error names the entry of a list that gRPC cannot dial.
func parseServers(addr string) (servers, error) {
	if !strings.Contains(addr, ",") {
		return servers{target: addr, addresses: []string{addr}, balanced: strings.HasPrefix(addr, "dns:")}, nil
	}
	entries := strings.Split(addr, ",")
	family := ""
	for i, entry := range entries {
		entry = strings.TrimSpace(entry)
		entries[i] = entry
		got, err := entryFamily(entry)
		if err == nil && family != "" && got != family {
			err = fmt.Errorf("is an %s address and entry 1 an %s one: gRPC balances over addresses of one family only; give a DNS name (dns:///NAME:PORT) that resolves to them all", got, family)
		}
		for j := range i {
			if err == nil && entries[j] == entry {
				err = fmt.Errorf("repeats entry %d: name each server once", j+1)
			}
		}
		if err != nil {
			return servers{}, fmt.Errorf("tikk: server list entry %d %q %w", i+1, shown(entry), err)
		}
		family = got
	}
	return servers{target: "tikk-servers:///" + entries[0], addresses: entries, balanced: true, static: entries}, nil
}

// entryFamily is "IPv4" or "IPv6", the family of a list's entry host:port, or why gRPC cannot
// put the entry in a list.
func entryFamily(entry string) (string, error) {
	if entry == "" {
		return "", fmt.Errorf("is empty: entries are host:port, separated by commas")
	}
	if scheme, _, _ := strings.Cut(entry, ":"); strings.Contains(entry, ":/") || targetSchemes[scheme] {
		return "", fmt.Errorf("is a gRPC target of its own: a list holds host:port entries only (a dns:/// name stands alone and resolves to every server itself)")
	}
	host, port, err := net.SplitHostPort(entry)
	if err != nil && strings.Count(entry, ":") > 1 && !strings.HasPrefix(entry, "[") {
		return "", fmt.Errorf("is an IPv6 address without brackets: give [address]:port")
	}
	if err != nil || port == "" {
		return "", fmt.Errorf("has no port: give host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strings.ContainsAny(port, "+-") {
		return "", fmt.Errorf("has port %q: a port is 1 to 65535", shown(port))
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return "", fmt.Errorf("names a host: a list holds IP addresses (gRPC balances over names only through DNS): give each server's address, or one dns:///NAME:PORT that resolves to them all")
	}
	if ip.Is4() {
		return "IPv4", nil
	}
	return "IPv6", nil
}

// shown is an entry as an error quotes it: at most 100 bytes.
func shown(s string) string {
	if len(s) > 100 {
		return s[:100]
	}
	return s
}

// hosts is how many hosts the servers are on.
func (s servers) hosts() int {
	seen := map[string]bool{}
	for _, addr := range s.addresses {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		seen[host] = true
	}
	return len(seen)
}

// dialOptions are what dialling several servers needs; none for one. authority: whether
// a list's calls carry the first server's (not when TLS names the servers' certificate: gRPC
// takes that name as the authority, and refuses two).
func (s servers) dialOptions(authority bool) []grpc.DialOption {
	if !s.balanced {
		return nil
	}
	opts := []grpc.DialOption{
		grpc.WithDefaultServiceConfig(roundRobin),
		grpc.WithKeepaliveParams(pings),
		grpc.WithChainUnaryInterceptor(repeatWhenSafe(max(3, len(s.addresses)))),
	}
	if s.static != nil {
		r := manual.NewBuilderWithScheme("tikk-servers")
		state := resolver.State{}
		for _, addr := range s.static {
			state.Addresses = append(state.Addresses, resolver.Address{Addr: addr})
		}
		r.InitialState(state)
		opts = append(opts, grpc.WithResolvers(r))
		if authority { // one for the list, the first server's, as the Python client sends
			opts = append(opts, grpc.WithAuthority(s.static[0]))
		}
	}
	return opts
}

// safeToRepeat says whether a call of the wrapper may be sent again after UNAVAILABLE, when
// it may have taken effect before its answer was lost (the rules of tikk/client/retries.py):
// reads, cancels (a cancelled task stays cancelled), and creates under an ID of the
// caller's (sent again, the same task or schedule). A create without one would make a
// second, so it is never repeated, nor is anything else.
func safeToRepeat(method string, req any) bool {
	switch r := req.(type) {
	case *tikkv1.CreateTaskRequest:
		return r.GetTaskId() != ""
	case *tikkv1.CreateScheduleRequest:
		return r.GetSchedule().GetId() != ""
	case *tikkv1.GetTaskRequest, *tikkv1.ListTasksRequest, *tikkv1.CancelTaskRequest,
		*tikkv1.ListTaskRunsRequest, *tikkv1.ListRunsRequest, *tikkv1.PreviewScheduleRequest:
		return true
	}
	return false
}

// repeatWhenSafe sends a call that is safe to repeat and ended UNAVAILABLE again, at most
// attempts times in all, after a short jittered wait (round robin gives it to the next
// server), within the call's context.
func repeatWhenSafe(attempts int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		for n := 1; n < attempts && status.Code(err) == codes.Unavailable && safeToRepeat(method, req); n++ {
			wait := time.Duration(rand.Int64N(int64(50*time.Millisecond) << n))
			select {
			case <-ctx.Done():
				return err
			case <-time.After(wait):
			}
			err = invoker(ctx, method, req, reply, cc, opts...)
		}
		return err
	}
}
