// Package embedded runs a NATS server with JetStream inside the process:
// what a new user gets from `weft up`, and what tests run against.
//
// Start returns once the server accepts connections, or at once with an
// error wrapping the cause when the server cannot start (its address is
// taken: errors.Is(err, syscall.EADDRINUSE)), not after a timeout.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options of the embedded server.
type Options struct {
	Host     string // default 127.0.0.1
	Port     int    // -1: a random free port; 0: 4222
	StoreDir string // JetStream storage; required
	Name     string
	// ConfigFile: a nats-server configuration file whose accounts, users
	// and TLS the server takes (weft nats-config writes the users); the
	// address, storage and limits above stay.
	ConfigFile string
}

// readyTimeout bounds the wait for a server that neither listens nor fails.
const readyTimeout = 10 * time.Second

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
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	opts := &server.Options{}
	if o.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
	}
	opts.ServerName, opts.Host, opts.Port = o.Name, o.Host, o.Port
	opts.JetStream, opts.StoreDir, opts.NoSigs, opts.MaxPayload = true, o.StoreDir, true, 8<<20
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	fatal := &fatalLog{failed: make(chan struct{})}
	s.SetLogger(fatal, false, false)
	go s.Start()
	deadline := time.Now().Add(readyTimeout)
	for !s.ReadyForConnections(25 * time.Millisecond) {
		select {
		case <-fatal.failed:
			s.Shutdown()
			s.WaitForShutdown()
			return nil, fmt.Errorf("embedded nats on %s: %w", addr, fatal.err)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			s.WaitForShutdown()
			return nil, fmt.Errorf("embedded nats: not ready on %s within %s", addr, readyTimeout)
		}
	}
	return s, nil
}

// fatalLog is the server's logger: it keeps nothing but the first fatal
// error (a listener that cannot bind, a JetStream store that cannot be
// opened), which the server only logs.
type fatalLog struct {
	once   sync.Once
	failed chan struct{}
	err    error
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.once.Do(func() {
		l.err = fmt.Errorf(format, v...)
		for _, a := range v {
			if e, ok := a.(error); ok {
				l.err = e // the cause (a listener's *net.OpError), for errors.Is
			}
		}
		close(l.failed)
	})
}

func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Errorf(string, ...any)  {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}
