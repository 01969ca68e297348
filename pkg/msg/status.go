package msg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StatusReader is the part of jetstream.KeyValue ReadStatus needs.
type StatusReader interface {
	ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error)
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

// ReadStatus collects every sync, render, validation and deploy status from
// BucketStatus into one report, targets in name order. Entries that do not
// decode are skipped.
func ReadStatus(ctx context.Context, kv StatusReader) (StatusReport, error) {
	rep := StatusReport{At: time.Now().UTC(), Targets: []TargetReport{}}
	keys, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("status: %w", err)
	}
	targets := map[string]*TargetReport{}
	tr := func(name string) *TargetReport {
		if t, ok := targets[name]; ok {
			return t
		}
		t := &TargetReport{Target: name}
		targets[name] = t
		return t
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		kind, rest, _ := strings.Cut(key, ".")
		switch kind {
		case ConfigStatusKey:
			var s ConfigStatus
			if Decode(e.Value(), &s) == nil {
				rep.Config = &s
			}
		case "sync":
			var s SyncStatus
			if Decode(e.Value(), &s) == nil {
				rep.Syncs = append(rep.Syncs, s)
			}
		case "render":
			var s RenderStatus
			if Decode(e.Value(), &s) == nil {
				tr(rest).Render = &s
			}
		case "validate":
			var s ValidationStatus
			if Decode(e.Value(), &s) == nil {
				tr(rest).Validation = &s
			}
		case "pin":
			var s Pin
			if Decode(e.Value(), &s) == nil {
				tr(rest).Pin = &s
			}
		case "canary":
			var s Canary
			if Decode(e.Value(), &s) == nil {
				tr(rest).Canary = &s
			}
		case "deploy":
			var s DeployStatus
			if Decode(e.Value(), &s) == nil {
				t := tr(s.Target)
				t.Deploys = append(t.Deploys, s)
			}
		}
	}
	slices.SortFunc(rep.Syncs, func(a, b SyncStatus) int { return strings.Compare(a.Source+"."+a.Type, b.Source+"."+b.Type) })
	for _, t := range targets {
		slices.SortFunc(t.Deploys, func(a, b DeployStatus) int { return strings.Compare(a.Instance, b.Instance) })
		rep.Targets = append(rep.Targets, *t)
	}
	slices.SortFunc(rep.Targets, func(a, b TargetReport) int { return strings.Compare(a.Target, b.Target) })
	return rep, nil
}

// StatusKV is the part of jetstream.KeyValue that LoadStatus and
// StoreStatus need.
type StatusKV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

// LoadStatus reads the status under key into into and returns its revision
// for a later StoreStatus; a missing key returns revision 0 and leaves into
// as it is. An entry that does not decode is reported with its revision, so
// the caller can overwrite it.
func LoadStatus[T Message](ctx context.Context, kv StatusKV, key string, into T) (uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("status %s: %w", key, err)
	}
	if err := Decode(e.Value(), into); err != nil {
		return e.Revision(), fmt.Errorf("status %s: %w", key, err)
	}
	return e.Revision(), nil
}

// StoreStatus writes v under key if the key is still at revision rev (0:
// absent): compare-and-set, so two writers never overwrite each other. A
// write that JetStream did not answer (a timeout, a NATS node lost) may
// have landed: when the key then holds exactly what was written, the write
// is done and its revision returned; a refusal (another writer came first)
// is returned as it is.
func StoreStatus[T Message](ctx context.Context, kv StatusKV, key string, v T, rev uint64) (uint64, error) {
	data, err := Encode(v)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		rev, err = kv.Create(ctx, key, data)
	} else {
		rev, err = kv.Update(ctx, key, data, rev)
	}
	if err != nil {
		if landed, ok := landedUnanswered(ctx, kv, key, data, err); ok {
			return landed, nil
		}
		return 0, fmt.Errorf("status %s: %w", key, err)
	}
	return rev, nil
}

// landedUnanswered reports the revision of key when a write of data that
// failed with err, which is not JetStream's refusal, is what key holds.
func landedUnanswered(ctx context.Context, kv StatusKV, key string, data []byte, err error) (uint64, bool) {
	var api jetstream.JetStreamError
	refused := errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &api) && api.APIError() != nil
	if refused || ctx.Err() != nil {
		return 0, false
	}
	e, gerr := kv.Get(ctx, key)
	if gerr != nil || !bytes.Equal(e.Value(), data) {
		return 0, false
	}
	return e.Revision(), true
}

// ReadPulls returns the per-node pull statuses in BucketPulls that are not
// Pulled (waiting, pulling or failed), by namespace, name and node.
// Entries that do not decode are skipped.
func ReadPulls(ctx context.Context, kv StatusReader) ([]PullStatus, error) {
	keys, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pulls: %w", err)
	}
	var out []PullStatus
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var s PullStatus
		if Decode(e.Value(), &s) == nil && s.Phase != PullPulled {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b PullStatus) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.Node, b.Namespace+"/"+b.Name+"/"+b.Node)
	})
	return out, nil
}
