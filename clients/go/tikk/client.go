// Package tikk is a small Go client of the tikk scheduler's gRPC API (package tikk.v1).
//
// One Client holds one connection and the namespace its calls act in:
//
//	c, err := tikk.Dial(ctx, "127.0.0.1:7070", tikk.WithNamespace("shop"))
//	if err != nil { ... }
//	defer c.Close()
//	task, created, err := c.CreateTask(ctx, tikk.TaskSpec{
//		ID: "welcome-7", Queue: "email", Handler: "send_welcome", Delay: 5 * time.Minute,
//	})
//
// Methods take Go values and return the generated tikk.v1 messages (package tikkv1). Every
// error a call returns is the gRPC status error itself, so status.FromError and status.Code
// give its code and message. For what the wrapper does not cover, Conn gives the connection
// for the generated clients (tikkv1.NewTaskServiceClient(c.Conn()) and so on).
package tikk

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tikk-scheduler/tikk/clients/go/tikkv1"
)

// Client calls a tikk server, or several (see Dial). It is safe for concurrent use.
type Client struct {
	conn      *grpc.ClientConn
	namespace string
	tasks     tikkv1.TaskServiceClient
	history   tikkv1.HistoryServiceClient
	schedules tikkv1.ScheduleServiceClient
}

type options struct {
	tls        bool
	caFile     string
	serverName string
	token      string
	namespace  string
	dial       []grpc.DialOption
}

// Option configures Dial.
type Option func(*options)

// WithTLS connects over TLS. caFile (PEM) is the CA the server's certificate must chain to;
// empty means the system's trusted roots. serverName, when not empty, is the name the
// certificate must carry instead of the host of the address.
func WithTLS(caFile, serverName string) Option {
	return func(o *options) { o.tls, o.caFile, o.serverName = true, caFile, serverName }
}

// WithToken sends token with every call as "authorization: Bearer <token>" metadata (a
// server started with --auth; tokens come from `tikk auth create`). As the Python client,
// Dial refuses to send a token without TLS to anything but a loopback address.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithNamespace sets the namespace of the client's calls; without it, "default".
func WithNamespace(namespace string) Option {
	return func(o *options) { o.namespace = namespace }
}

// WithDialOptions adds grpc dial options (interceptors, keepalive, ...) after the client's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// Dial connects to the tikk server at addr ("host:port") and waits until the connection is
// ready or ctx ends; an unreachable server is then a codes.Unavailable status error. addr may
// name several servers, calls balanced over them (servers.go): "10.0.0.1:7070,10.0.0.2:7070"
// or "dns:///tikk.internal:7070"; Dial then waits for one of them, and a list it cannot dial
// is an error naming the entry.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	conn, err := o.connect(addr)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, conn); err != nil {
		conn.Close()
		return nil, status.Errorf(codes.Unavailable, "tikk: %s not reachable: %v", addr, err)
	}
	return &Client{
		conn:      conn,
		namespace: o.namespace,
		tasks:     tikkv1.NewTaskServiceClient(conn),
		history:   tikkv1.NewHistoryServiceClient(conn),
		schedules: tikkv1.NewScheduleServiceClient(conn),
	}, nil
}

// Connect opens a connection to the servers at addr as Dial does (the same forms of addr and
// the same options) without waiting for one of them: calls made before a server answers
// wait for it if they ask to (grpc.WaitForReady), else fail UNAVAILABLE. For the generated
// clients of processes that may start before their servers, such as a worker.
func Connect(addr string, opts ...Option) (*grpc.ClientConn, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	return o.connect(addr)
}

func (o *options) connect(addr string) (*grpc.ClientConn, error) {
	servers, err := parseServers(addr)
	if err != nil {
		return nil, err
	}
	dial, err := o.dialOptions(servers)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(servers.target, append(dial, o.dial...)...)
}

func (o *options) dialOptions(s servers) ([]grpc.DialOption, error) {
	dial := s.dialOptions(o.serverName == "")
	if o.tls && o.serverName == "" && s.hosts() > 1 {
		return nil, fmt.Errorf("tikk: the servers of %s are checked against one name over TLS, and they are on different hosts: give the name their certificates share (WithTLS serverName)", strings.Join(s.addresses, ","))
	}
	if o.tls {
		cfg := &tls.Config{ServerName: o.serverName, MinVersion: tls.VersionTLS12}
		creds := credentials.NewTLS(cfg)
		if o.caFile != "" {
			var err error
			if creds, err = credentials.NewClientTLSFromFile(o.caFile, o.serverName); err != nil {
				return nil, fmt.Errorf("tikk: the CA file %s: %w", o.caFile, err)
			}
		}
		dial = append(dial, grpc.WithTransportCredentials(creds))
	} else {
		dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if o.token != "" {
		for _, addr := range s.addresses {
			if !o.tls && !IsLoopback(addr) {
				return nil, fmt.Errorf("tikk: a token is sent only over TLS or to a loopback address, not to %s", addr)
			}
		}
		if strings.ContainsAny(o.token, " \r\n\t") {
			return nil, fmt.Errorf("tikk: the token holds white space")
		}
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	return dial, nil
}

func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("%w (connection %s)", ctx.Err(), state)
		}
	}
}

// bearer is the per-call credential of WithToken. It does not itself require TLS (the
// embedded server on loopback serves plaintext); Dial checks where it may go.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// IsLoopback reports whether addr ("host:port", "[v6]:port", "unix:path") reaches only this
// machine: "localhost" or a loopback IP. Any other name is not.
func IsLoopback(addr string) bool {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return true
	}
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "dns:///"), "passthrough:///")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the client's connection, for the generated clients of package tikkv1.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Namespace is the namespace of the client's calls ("" is the server's "default").
func (c *Client) Namespace() string { return c.namespace }
