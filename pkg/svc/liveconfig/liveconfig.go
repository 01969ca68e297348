// Package liveconfig runs weft on a configuration that can change while it
// runs. Propose takes a candidate weft.yaml (from a ConfigMap, say), parses
// it, has it validated by the validator's scatter-gather (the template kind
// compiles every target), and only when it passes makes it the active
// configuration in the config bucket; the verdict is kept in the status
// bucket either way, and a rejected candidate leaves the last good
// configuration running. Watch yields the active configuration and every
// later one; the host restarts its services on each.
//
// A process whose configuration is a file follows it with FollowFile
// instead: on SIGHUP or a change of the file, the new text is validated
// the same way (Check: the verdict is kept in the status bucket, the
// config bucket is left alone) and, when it passes, yielded; a rejected
// or unreadable file is logged at ERROR and the running configuration
// stays.
package liveconfig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/pkg/svc/gather"
)

// ErrRejected is returned by Propose for a candidate that did not pass.
var ErrRejected = errors.New("configuration rejected")

// Hash identifies a configuration text.
func Hash(yaml string) string {
	sum := sha256.Sum256([]byte(yaml))
	return hex.EncodeToString(sum[:12])
}

// Propose validates yaml and makes it the active configuration if it
// passes. A candidate equal to the active one changes nothing.
func Propose(ctx context.Context, env svc.Env, yaml, origin string, timeout time.Duration) (msg.ConfigStatus, error) {
	cand := msg.Config{Hash: Hash(yaml), YAML: yaml, Origin: origin, At: time.Now().UTC()}
	st := msg.ConfigStatus{Candidate: cand.Hash, Origin: origin, At: cand.At}
	cfgKV, err := env.JS.KeyValue(ctx, msg.BucketConfig)
	if err != nil {
		return st, fmt.Errorf("liveconfig: %w", err)
	}
	var active msg.Config
	activeRev, err := msg.LoadStatus(ctx, cfgKV, msg.ConfigKey, &active)
	if err != nil && activeRev == 0 {
		return st, fmt.Errorf("liveconfig: %w", err)
	}
	st.Active = active.Hash
	if active.Hash == cand.Hash {
		st.OK = true
		return st, nil
	}
	return judge(ctx, env, cand, st, timeout, func() error {
		data, err := msg.Encode(cand)
		if err != nil {
			return err
		}
		if activeRev == 0 {
			_, err = cfgKV.Create(ctx, msg.ConfigKey, data)
		} else {
			_, err = cfgKV.Update(ctx, msg.ConfigKey, data, activeRev)
		}
		if err != nil {
			return fmt.Errorf("liveconfig: activate: %w", err)
		}
		return nil
	})
}

// Check validates yaml as Propose does and keeps the verdict in the status
// bucket, but activates nothing: it is for a process whose configuration
// is its own file (which the caller swaps in when Check passes), not the
// config bucket. active is the hash of the configuration that runs.
func Check(ctx context.Context, env svc.Env, yaml, origin, active string, timeout time.Duration) (msg.ConfigStatus, error) {
	cand := msg.Config{Hash: Hash(yaml), YAML: yaml, Origin: origin, At: time.Now().UTC()}
	st := msg.ConfigStatus{Candidate: cand.Hash, Origin: origin, At: cand.At, Active: active}
	return judge(ctx, env, cand, st, timeout, func() error { return nil })
}

// judge validates cand, calls activate when it passes, logs the verdict
// and keeps it in the status bucket.
func judge(ctx context.Context, env svc.Env, cand msg.Config, st msg.ConfigStatus, timeout time.Duration, activate func() error) (msg.ConfigStatus, error) {
	statusKV, err := env.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return st, fmt.Errorf("liveconfig: %w", err)
	}
	st.Problems, err = validate(ctx, env, cand, timeout)
	if err != nil {
		return st, err
	}
	st.OK = len(st.Problems) == 0
	if st.OK {
		if err := activate(); err != nil {
			return st, err
		}
		st.Active = cand.Hash
		env.Log.InfoContext(ctx, "configuration activated", "hash", cand.Hash, "origin", cand.Origin)
	} else {
		env.Log.ErrorContext(ctx, "configuration rejected; the running one stays", "hash", cand.Hash, "origin", cand.Origin, "problems", st.Problems)
	}
	data, err := msg.Encode(st)
	if err == nil {
		_, err = statusKV.Put(ctx, msg.ConfigStatusKey, data)
	}
	if err != nil {
		return st, fmt.Errorf("liveconfig: status: %w", err)
	}
	if !st.OK {
		return st, fmt.Errorf("%w: %d problems", ErrRejected, len(st.Problems))
	}
	return st, nil
}

// validate parses the candidate here (cheap, and a YAML error needs no
// round trip) and then asks the validator's template kind. An answer that
// is no verdict (the kind did not answer, or could not decide: a validator
// stopping, a candidate it could not read yet) is asked again, a few times,
// before what the kinds said is taken as the candidate's problems: several
// processes proposing the same text at once, or a validator restarting on
// the very edit it is asked about, must not reject a good configuration.
func validate(ctx context.Context, env svc.Env, cand msg.Config, timeout time.Duration) ([]msg.Problem, error) {
	if _, err := config.Parse([]byte(cand.YAML), "/"); err != nil {
		return parseProblems(err), nil
	}
	if err := msg.NewBundleStore(env.JS, msg.WithChunkCache(0)).PutConfig(ctx, cand); err != nil {
		return nil, fmt.Errorf("liveconfig: store candidate: %w", err)
	}
	var res gather.Result
	var err error
	for try := 0; ; try++ {
		res, err = gather.Validate(ctx, env.NC, msg.ValidateSubject(msg.ConfigTarget),
			msg.ValidateRequest{Target: msg.ConfigTarget, ConfigHash: cand.Hash}, []string{config.KindTemplate}, timeout)
		if err != nil {
			return nil, fmt.Errorf("liveconfig: validate: %w", err)
		}
		if res.Decided(0) || try+1 >= undecidedTries {
			break
		}
		env.Log.InfoContext(ctx, "no verdict on the configuration yet; asking again", "hash", cand.Hash, "undecided", res.Undecided())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(undecidedDelay << try):
		}
	}
	var problems []msg.Problem
	for _, k := range res.Missing {
		problems = append(problems, msg.Problem{Severity: "error", Message: "validator kind " + k + " did not answer"})
	}
	for _, r := range res.Replies {
		if r.Error != "" {
			problems = append(problems, msg.Problem{Severity: "error", Message: r.Kind + " could not decide: " + r.Error})
		}
		for _, p := range r.Problems {
			if p.Severity != "warning" {
				problems = append(problems, p)
			}
		}
	}
	return problems, nil
}

// How often, and after how long (doubling), a candidate without a verdict
// is asked about again.
const (
	undecidedTries = 5
	undecidedDelay = 250 * time.Millisecond
)

// Watch yields the active configuration now (if any) and each later one,
// parsed with dir for relative paths, until ctx is done.
func Watch(ctx context.Context, env svc.Env, dir string) (<-chan *config.Config, error) {
	kv, err := env.JS.KeyValue(ctx, msg.BucketConfig)
	if err != nil {
		return nil, fmt.Errorf("liveconfig: %w", err)
	}
	w, err := msg.Watch(ctx, kv, []string{msg.ConfigKey}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("liveconfig: %w", err)
	}
	out := make(chan *config.Config)
	go func() {
		defer close(out)
		defer msg.StopWatch(w)
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // end of the initial values
				}
				var c msg.Config
				if err := msg.Decode(e.Value(), &c); err != nil {
					env.Log.Error("unreadable active configuration", "err", err)
					continue
				}
				cfg, err := config.Parse([]byte(c.YAML), dir)
				if err != nil {
					env.Log.Error("active configuration does not parse here", "hash", c.Hash, "err", err)
					continue
				}
				select {
				case out <- cfg:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// parseProblems turns the problems of a configuration that does not load
// into one Problem each, with its line and field path.
func parseProblems(err error) []msg.Problem {
	var ps config.Problems
	if !errors.As(err, &ps) {
		return []msg.Problem{{File: "weft.yaml", Severity: "error", Message: err.Error()}}
	}
	out := make([]msg.Problem, 0, len(ps))
	for _, p := range ps {
		m := p.Message
		if p.Path != "" {
			m = p.Path + ": " + m
		}
		out = append(out, msg.Problem{File: p.File, Line: p.Line, Severity: "error", Message: m})
	}
	return out
}
