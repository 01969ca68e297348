package deployer

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
)

// How an order that cannot be carried out is retried and reported: the
// first retry after retryFirst, each next one after twice the delay, at
// most retryMax; the failure is reported (ERROR log, failed outcome) when a
// streak starts, when its error changes, and every failureReminder while
// it lasts. Tests shorten them (export_test.go).
var (
	retryFirst      = time.Second
	retryMax        = time.Minute
	failureReminder = 10 * time.Minute
)

// retryDelay is the wait after the attempt-th failed attempt of an order.
func retryDelay(attempt uint64) time.Duration {
	delay := retryFirst
	for i := uint64(1); i < attempt && delay < retryMax; i++ {
		delay *= 2
	}
	return min(delay, retryMax)
}

// failureStreak is what a deployer reported of an instance's failing
// deploys; only the instance's consumer touches it.
type failureStreak struct {
	since, reported time.Time // zero: not failing
	err, bundle     string    // the last error reported, and its order's bundle
	attempts        uint64
}

// failed records a failed attempt to carry out o: in the instance's status
// and the failed-deploys metric on every attempt, and, when the failure is
// news (a new streak, another error or bundle, a reminder due), in an
// ERROR log and a failed outcome on weft.deployed.<target>.<instance>.
func (d *deployer) failed(ctx context.Context, log *slog.Logger, in *instance, o msg.DeployOrder, attempt uint64, err error) {
	now := time.Now().UTC()
	s := &in.streak
	s.attempts++
	news := s.since.IsZero() || s.err != err.Error() || s.bundle != o.BundleHash || now.Sub(s.reported) >= failureReminder
	if s.since.IsZero() {
		s.since = now
	}
	d.m.deploys.WithLabelValues(in.target, in.name, in.driver, msg.OutcomeFailed).Inc()
	retry := retryDelay(attempt)
	if news {
		s.err, s.bundle, s.reported = err.Error(), o.BundleHash, now
		log.ErrorContext(ctx, "deploy failed; retrying", "err", err, "attempt", attempt,
			"failing_since", s.since, "failed_attempts", s.attempts, "retry_in", retry)
		out := msg.Deployed{Target: o.Target, Instance: o.Instance, Version: o.Version, BundleHash: o.BundleHash,
			Driver: in.driver, Outcome: msg.OutcomeFailed, Error: err.Error(), Attempt: attempt, At: now}
		if _, perr := bus.Publish(ctx, d.env.JS, msg.DeployedSubject(o.Target, o.Instance), "", out); perr != nil {
			log.WarnContext(ctx, "failed deploy not published", "err", perr)
		}
	}
	if serr := d.recordFailure(ctx, in, err.Error(), now); serr != nil {
		log.WarnContext(ctx, "failed deploy not recorded in the status", "err", serr)
	}
}

// recordFailure keeps the error of a failing deploy in the instance's
// status, which `weft status` shows, with the count of failed attempts.
func (d *deployer) recordFailure(ctx context.Context, in *instance, reason string, at time.Time) error {
	st, rev, err := d.readStatus(ctx, in)
	if err != nil {
		return err
	}
	st.Driver, st.LastError, st.LastErrorAt = in.driver, reason, at
	st.Failures++
	return d.writeStatus(ctx, st, rev)
}

// recovered ends the instance's failure streak after an order was carried
// out (the status was cleared with its outcome).
func (d *deployer) recovered(ctx context.Context, log *slog.Logger, in *instance) {
	s := &in.streak
	if s.since.IsZero() {
		return
	}
	log.InfoContext(ctx, "deploy succeeded after failing", "failing_since", s.since, "failed_attempts", s.attempts)
	*s = failureStreak{}
}

// waitRetry waits delay before the next attempt of the order with stream
// sequence seq, and reports whether a newer order for the instance came in
// meanwhile (or already had): that one then takes over. It returns early
// with ctx's error.
func (d *deployer) waitRetry(ctx context.Context, in *instance, seq uint64, delay time.Duration) (bool, error) {
	subject := msg.DeploySubject(in.target, in.name)
	// Orders are published to the stream's subject, which core
	// subscribers see too: a new order ends the wait at once.
	ch := make(chan *nats.Msg, 1)
	if sub, err := d.env.NC.ChanSubscribe(subject, ch); err == nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	if d.newerOrder(ctx, subject, seq) {
		return true, nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return d.newerOrder(ctx, subject, seq), nil
	case <-ch:
		return d.newerOrder(ctx, subject, seq), nil
	}
}

// newerOrder reports whether the stream holds an order on subject after
// the one with sequence seq.
func (d *deployer) newerOrder(ctx context.Context, subject string, seq uint64) bool {
	if seq == 0 {
		return false
	}
	st, err := d.env.JS.Stream(ctx, msg.StreamDeploys)
	if err != nil {
		return false
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	return err == nil && m.Sequence > seq
}
