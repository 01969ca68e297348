// Package embedded runs a NATS server with JetStream inside the process:
// what a new user gets from `weft up`, and what tests run against.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options of the embedded server.
type Options struct {
	Host     string // default 127.0.0.1
	Port     int    // -1: a random free port; 0: 4222
	StoreDir string // JetStream storage; required
	Name     string
}

// Start starts the server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats: store dir required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = 4222
	}
	if o.Name == "" {
		o.Name = "weft"
	}
	s, err := server.NewServer(&server.Options{
		ServerName: o.Name,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready on %s", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	}
	return s, nil
}
