package main

import (
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"

	"github.com/tikk-scheduler/tikk/clients/go/tikk"
)

// dial opens the channel to the servers without waiting for one: address is one server
// ("host:port"), a comma-separated list of them, or "dns:///NAME:PORT", balanced round robin
// as the Go client does (a call that fails UNAVAILABLE goes to the next server). TLS when a
// CA is given; the bearer token (if any) on every call, and in clear only to loopback.
func dial(address, caFile, serverName, token string) (*grpc.ClientConn, error) {
	var options []tikk.Option
	if caFile != "" {
		options = append(options, tikk.WithTLS(caFile, serverName))
	}
	if token != "" {
		options = append(options, tikk.WithToken(token))
	}
	return tikk.Connect(address, options...)
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
