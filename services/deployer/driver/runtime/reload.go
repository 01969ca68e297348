package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/weftio/weft/pkg/svc/pause"
)

// pollFirst and pollMax bound the pause between two looks at the master.
const (
	pollFirst = 2 * time.Millisecond
	pollMax   = 50 * time.Millisecond
)

// procState reads "show proc", waiting through the moments when the master
// cannot answer (it refuses connections or answers nothing while it
// re-executes) until ctx ends. A missing socket file fails at once.
func (d *Driver) procState(ctx context.Context) (procState, error) {
	wait := pollFirst
	for {
		out, err := d.master.do(ctx, "show proc")
		if err == nil {
			st, perr := parseShowProc(out)
			if perr == nil {
				return st, nil
			}
			err = perr
		}
		if errors.Is(err, fs.ErrNotExist) {
			return procState{}, err
		}
		if cerr := ctx.Err(); cerr != nil {
			return procState{}, fmt.Errorf("%w (last: %w)", cerr, err)
		}
		if err := pause.For(ctx, wait); err != nil {
			return procState{}, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		}
		wait = min(wait*2, pollMax)
	}
}

// reloadCount returns the master's reload counter.
func (d *Driver) reloadCount(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.CommandTimeout)
	defer cancel()
	st, err := d.procState(ctx)
	if err != nil {
		return -1, fmt.Errorf("%w: show proc on %s: %w", ErrUnreachable, d.opts.MasterSocket, err)
	}
	return st.reloads, nil
}

// reload asks the master to reload and waits until the reload took: the
// master's reload counter moved, no reload failure is reported, a worker that
// did not exist before runs while the previous ones are leaving, and that new
// worker answers on its CLI. It returns the reload counter.
//
// HAProxy 2.6's master answers "reload" before doing anything, so all of
// this is read from "show proc" afterwards.
func (d *Driver) reload(ctx context.Context) (int, error) {
	before, err := func() (procState, error) {
		ctx, cancel := context.WithTimeout(ctx, d.opts.CommandTimeout)
		defer cancel()
		return d.procState(ctx)
	}()
	if err != nil {
		return -1, fmt.Errorf("%w: show proc on %s: %w", ErrUnreachable, d.opts.MasterSocket, err)
	}
	if err := d.master.send(ctx, "reload"); err != nil {
		return before.reloads, fmt.Errorf("%w: send reload to %s: %w", ErrUnreachable, d.opts.MasterSocket, err)
	}

	ctx, cancel := context.WithTimeout(ctx, d.opts.ReloadTimeout)
	defer cancel()
	known := slices.Concat(before.workers, before.old)
	last := before
	wait := pollFirst
	for {
		st, err := d.procState(ctx)
		if err != nil {
			return last.reloads, fmt.Errorf("%w: waiting for the new worker: %w", ErrReloadFailed, err)
		}
		last = st
		if st.master != before.master || st.reloads > before.reloads {
			if st.failed > 0 {
				return st.reloads, fmt.Errorf("%w: HAProxy did not load the new configuration (show proc: %d failed reload(s)); the previous worker keeps serving", ErrReloadFailed, st.failed)
			}
			fresh := 0
			for _, w := range st.workers {
				if !slices.Contains(known, w) {
					fresh = w
				}
			}
			stillCurrent := slices.ContainsFunc(before.workers, func(w int) bool { return slices.Contains(st.workers, w) })
			if fresh != 0 && !stillCurrent {
				if err := d.waitWorker(ctx, fresh); err != nil {
					return st.reloads, err
				}
				d.waitOldWorkers(ctx, before.workers)
				return st.reloads, nil
			}
		}
		if err := pause.For(ctx, wait); err != nil {
			return last.reloads, fmt.Errorf("%w: no new worker after %s (show proc: %d reloads, workers %v): %w", ErrReloadFailed, d.opts.ReloadTimeout, last.reloads, last.workers, err)
		}
		wait = min(wait*2, pollMax)
	}
}

// waitOldWorkers waits until the workers that ran before the reload no
// longer take connections: while one listens, it may still accept them on a
// shared admin socket, and a runtime command that reached it would be lost.
// A previous worker is done when it has left, or when it says ("show info"
// through the master) that it is stopping and keeps no listener but its
// link to the master: it then only serves the connections it holds
// (WebSockets, long requests) until they end or hard-stop-after closes
// them, and the deploy does not wait for them. When a worker cannot be
// asked, it is waited for at most oldWorkerWait; commands then go out
// regardless.
func (d *Driver) waitOldWorkers(ctx context.Context, previous []int) {
	ctx, cancel := context.WithTimeout(ctx, oldWorkerWait)
	defer cancel()
	pending := slices.Clone(previous)
	wait := pollFirst
	for {
		if st, err := d.procState(ctx); err == nil {
			pending = slices.DeleteFunc(pending, func(w int) bool {
				return !slices.Contains(st.old, w) || d.stoppedListening(ctx, w)
			})
			if len(pending) == 0 {
				return
			}
		}
		if pause.For(ctx, wait) != nil {
			return
		}
		wait = min(wait*2, pollMax)
	}
}

// oldWorkerWait bounds waitOldWorkers.
const oldWorkerWait = 2 * time.Second

// stoppedListening asks the worker pid, through the master, whether it has
// stopped listening.
func (d *Driver) stoppedListening(ctx context.Context, pid int) bool {
	out, err := d.master.do(ctx, "@!"+strconv.Itoa(pid)+" show info")
	return err == nil && infoPid(out) == pid && infoStoppedListening(out)
}

// waitWorker waits until the worker pid answers "show info": on the admin
// socket, so that the next runtime commands reach it, or, when there is no
// admin socket or it cannot be reached, through the master.
func (d *Driver) waitWorker(ctx context.Context, pid int) error {
	wait := pollFirst
	for {
		var err error
		viaMaster := d.opts.AdminSocket == ""
		if !viaMaster {
			var out string
			out, err = d.admin.do(ctx, "show info")
			switch got := infoPid(out); {
			case err == nil && got == pid:
				return nil
			case err == nil:
				err = fmt.Errorf("admin socket answered by pid %d", got)
			default:
				viaMaster = true
			}
		}
		if viaMaster {
			var out string
			out, err = d.master.do(ctx, "@!"+strconv.Itoa(pid)+" show info")
			if got := infoPid(out); err == nil && got == pid {
				return nil
			} else if err == nil {
				err = fmt.Errorf("master CLI: %s", trimAnswer(out))
			}
		}
		if serr := pause.For(ctx, wait); serr != nil {
			return fmt.Errorf("%w: new worker %d did not answer: %w (%w)", ErrReloadFailed, pid, serr, err)
		}
		wait = min(wait*2, pollMax)
	}
}
