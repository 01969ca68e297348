package host

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// ErrAddrInUse is wrapped by the errors of addresses a process is to
// listen on that another process holds.
var ErrAddrInUse = errors.New("address in use")

// Addr is an address a process listens on, what listens there and how a
// person changes it.
type Addr struct {
	Addr   string // host:port; port 0 is never taken
	What   string // "embedded NATS server"
	Change string // "--nats-listen or WEFT_NATS_LISTEN"
}

// Addrs lists the addresses the settings make a process listen on.
func (s Settings) Addrs() []Addr {
	var out []Addr
	if s.NATSURL == "" {
		out = append(out, Addr{Addr: s.Embedded, What: "embedded NATS server", Change: "--nats-listen or WEFT_NATS_LISTEN"})
	}
	if s.MetricsListen != "" && s.MetricsListen != s.Listen {
		return append(out,
			Addr{Addr: s.Listen, What: "/healthz and /readyz", Change: "controller.healthz_port, --listen or WEFT_LISTEN"},
			Addr{Addr: s.MetricsListen, What: "/metrics", Change: "controller.metrics_port, --listen or WEFT_LISTEN"})
	}
	return append(out, Addr{Addr: s.Listen, What: "/healthz, /readyz and /metrics", Change: "--listen or WEFT_LISTEN"})
}

// CheckAddrs listens on each address and closes it again, and returns an
// error naming every address that is taken (wrapping ErrAddrInUse) or
// cannot be listened on, and how to change it; nil when all are free.
func CheckAddrs(addrs ...Addr) error {
	var errs []error
	for _, a := range addrs {
		l, err := net.Listen("tcp", a.Addr)
		if err != nil {
			errs = append(errs, a.Failed(err))
			continue
		}
		_ = l.Close()
	}
	return errors.Join(errs...)
}

// Failed describes err, an error of listening on a: a taken address wraps
// ErrAddrInUse and says how to change it.
func (a Addr) Failed(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s (%s): %w by another program (another weft?); stop it or change the address with %s (%w)",
			a.Addr, a.What, ErrAddrInUse, a.Change, err)
	}
	return fmt.Errorf("%s (%s) cannot be listened on; change the address with %s: %w", a.Addr, a.What, a.Change, err)
}

// IfTaken is Failed for an error saying that a is taken, and err unchanged
// otherwise: for errors of starting what listens on a, which can fail for
// other reasons.
func (a Addr) IfTaken(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return a.Failed(err)
	}
	return err
}
