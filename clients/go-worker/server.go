package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// dial opens the channel to the server: TLS when a CA is given, and the bearer token (if
// any) on every call, as tikk/client/transport.py does.
func dial(address, caFile, serverName, token string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if caFile != "" {
		tlsCreds, err := credentials.NewClientTLSFromFile(caFile, serverName)
		if err != nil {
			return nil, fmt.Errorf("server TLS: %w", err)
		}
		creds = tlsCreds
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if token != "" {
		// Like the Python transport: a token goes in clear only to this machine.
		if caFile == "" && !loopback(address) {
			return nil, fmt.Errorf("a token is sent over TLS only (or to a loopback address); give -tls-ca")
		}
		options = append(options, grpc.WithPerRPCCredentials(bearer(token)))
	}
	return grpc.NewClient(address, options...)
}

// bearer sends "authorization: Bearer <token>" with every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that a loopback server without TLS works; dial
// refuses a token in clear to any other address.
func (bearer) RequireTransportSecurity() bool { return false }

func loopback(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// readToken reads the token from file (its first line), else from $TIKK_TOKEN.
func readToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv("TIKK_TOKEN")), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(line), nil
}
