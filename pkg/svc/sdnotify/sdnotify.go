// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) for a
// service of Type=notify: each state ("READY=1", "STATUS=...",
// "WATCHDOG=1", "STOPPING=1") is one datagram to the Unix socket named by
// $NOTIFY_SOCKET, a name starting with '@' being an abstract socket. A
// process systemd did not start (no $NOTIFY_SOCKET) gets a nil *Notifier,
// on which every method does nothing. WatchdogInterval reads
// $WATCHDOG_USEC (and $WATCHDOG_PID, which must name this process); Watchdog
// pets the watchdog every half of it, and only while the process is
// healthy, so that systemd restarts a process that stopped being so.
package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables systemd sets.
const (
	SocketEnv       = "NOTIFY_SOCKET"
	WatchdogUSecEnv = "WATCHDOG_USEC"
	WatchdogPIDEnv  = "WATCHDOG_PID"
)

// States.
const (
	Ready         = "READY=1"
	Stopping      = "STOPPING=1"
	WatchdogState = "WATCHDOG=1"
)

// Status is the STATUS= state: a line systemctl status shows.
func Status(line string) string {
	return "STATUS=" + strings.ReplaceAll(line, "\n", " ")
}

// Notifier sends states to systemd.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns the Notifier of $NOTIFY_SOCKET, nil when it is unset
// (systemd did not start the process, or not as Type=notify).
func FromEnv() *Notifier {
	name := os.Getenv(SocketEnv)
	if name == "" {
		return nil
	}
	return New(name)
}

// New returns the Notifier of the socket name: a path, or '@' and the
// name of an abstract socket.
func New(name string) *Notifier {
	if strings.HasPrefix(name, "@") {
		name = "\x00" + name[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}
}

// Notify sends states, joined by newlines, as one datagram. A nil
// Notifier sends nothing.
func (n *Notifier) Notify(states ...string) error {
	if n == nil || len(states) == 0 {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte(strings.Join(states, "\n"))); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// ErrWatchdogPID is returned by WatchdogInterval when $WATCHDOG_PID names
// another process: the watchdog is not this process's to pet.
var ErrWatchdogPID = errors.New("WATCHDOG_PID names another process")

// WatchdogInterval returns $WATCHDOG_USEC as a duration, 0 when the
// watchdog is off (unset, or $WATCHDOG_PID names another process).
func WatchdogInterval() (time.Duration, error) {
	v := os.Getenv(WatchdogUSecEnv)
	if v == "" {
		return 0, nil
	}
	usec, err := strconv.ParseUint(v, 10, 63)
	if err != nil || usec == 0 {
		return 0, fmt.Errorf("%s=%q is not a positive number of microseconds", WatchdogUSecEnv, v)
	}
	if pid := os.Getenv(WatchdogPIDEnv); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, fmt.Errorf("%w (%s=%s, this is %d)", ErrWatchdogPID, WatchdogPIDEnv, pid, os.Getpid())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// Watchdog sends WATCHDOG=1 every interval/2 while healthy returns nil,
// until ctx is done; a tick on which healthy fails sends nothing and, on
// a change, a STATUS= line naming the failure (onErr gets the errors of
// sending). An interval of 0 or a nil Notifier returns at once.
func (n *Notifier) Watchdog(ctx context.Context, interval time.Duration, healthy func() error, onErr func(error)) {
	if n == nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	var last string
	for {
		var err error
		if herr := healthy(); herr == nil {
			err = n.Notify(WatchdogState)
			last = ""
		} else if herr.Error() != last {
			last = herr.Error()
			err = n.Notify(Status("unhealthy, not petting the watchdog: " + last))
		}
		if err != nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
