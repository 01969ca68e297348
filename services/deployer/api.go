package deployer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// errRefused marks a request the deployer answers with an error for what
// it asks (an unknown target or version, a bundle validation refused): the
// answer says why; it is logged, not dead-lettered.
var errRefused = errors.New("refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errRefused, fmt.Sprintf(format, args...))
}

// apiHandler serves one weft.api request about a target: it answers with
// the reply, or with a msg.APIError saying why there is none.
type apiHandler func(ctx context.Context, target string, data []byte) (msg.Message, error)

type api struct {
	subject, stage string
	handler        func(context.Context, *nats.Msg) error
}

// historyAPI are the requests about a target's history the deployer
// answers (queue group msg.APIQueue: any replica).
func (d *deployer) historyAPI() []api {
	return []api{
		{msg.APIHistoryAll, "api-history", d.serveAPI(d.onHistory)},
		{msg.APIDiffAll, "api-diff", d.serveAPI(d.onDiff)},
		{msg.APIRollbackAll, "api-rollback", d.serveAPI(d.onRollback)},
		{msg.APIUnpinAll, "api-unpin", d.serveAPI(d.onUnpin)},
	}
}

// serveAPI answers a request with h's reply, or its error as a
// msg.APIError. Refusals are logged; other errors are the handler's
// (logged, dead-lettered when permanent).
func (d *deployer) serveAPI(h apiHandler) func(context.Context, *nats.Msg) error {
	return func(ctx context.Context, m *nats.Msg) error {
		rep, err := h(ctx, msg.SubjectToken(m.Subject, 3), m.Data)
		if m.Reply != "" {
			err = d.answer(m, rep, err)
		}
		if errors.Is(err, errRefused) {
			d.env.Log.WarnContext(ctx, "request refused", "subject", m.Subject, "err", err)
			return nil
		}
		return err
	}
}

// answer sends rep, or err as a msg.APIError, to m's reply subject; it
// returns the error the request ends with.
func (d *deployer) answer(m *nats.Msg, rep msg.Message, err error) error {
	var out *nats.Msg
	if err == nil {
		var eerr error
		if out, eerr = msg.NewMsg(m.Reply, "", rep); eerr != nil {
			// Too large, most likely (a diff of big bundles).
			err = refused("the answer cannot be sent: %v", eerr)
		}
	}
	if err != nil {
		out, _ = msg.NewMsg(m.Reply, "", msg.APIError{Message: err.Error()})
	}
	if rerr := m.RespondMsg(out); rerr != nil && err == nil {
		err = fmt.Errorf("answer %s: %w", m.Subject, rerr)
	}
	return err
}

// knownTarget refuses a target this deployer's configuration lacks.
func (d *deployer) knownTarget(target string) error {
	if _, ok := d.cfg.Targets[target]; !ok {
		return refused("unknown target %q (known: %s)", target, strings.Join(d.cfg.TargetNames(), ", "))
	}
	return nil
}

// targetHistory reads target's kept entries, newest first; a target this
// deployer's configuration lacks is refused.
func (d *deployer) targetHistory(ctx context.Context, target string) ([]msg.HistoryEntry, error) {
	if err := d.knownTarget(target); err != nil {
		return nil, err
	}
	all, err := d.readHistory(ctx, msg.HistoryPrefix(target)+"*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, msg.Retry(err, time.Second)
	}
	return all[target], nil
}

func (d *deployer) onHistory(ctx context.Context, target string, data []byte) (msg.Message, error) {
	var req msg.HistoryRequest
	if err := msg.DecodeRequest(data, &req); err != nil {
		return nil, refused("%v", err)
	}
	es, err := d.targetHistory(ctx, target)
	if err != nil {
		return nil, err
	}
	h := historyOf(d.cfg, target)
	rep := msg.HistoryReply{Target: target, Entries: es, Keep: h.Keep, MaxAge: h.MaxAge.D(), At: time.Now().UTC()}
	if rep.Entries == nil {
		rep.Entries = []msg.HistoryEntry{}
	}
	if rep.Pin, err = d.readPin(ctx, target); err != nil {
		return nil, err
	}
	vs, err := d.validation(ctx, target)
	if err != nil {
		return nil, err
	}
	rep.LastGood = vs.LastGoodVersion
	st, err := msg.ReadStatus(ctx, d.status)
	if err != nil {
		return nil, msg.Retry(err, time.Second)
	}
	for _, t := range st.Targets {
		if t.Target != target {
			continue
		}
		for _, s := range t.Deploys {
			if rep.Running == nil {
				rep.Running = map[string]uint64{}
			}
			rep.Running[s.Instance] = s.Version
		}
	}
	return rep, nil
}

// resolve finds the entry a person names: a version ("3" or "v3"), a
// bundle hash, or a hash's unambiguous prefix.
func resolve(target, name string, es []msg.HistoryEntry) (msg.HistoryEntry, error) {
	name = strings.TrimSpace(name)
	if v, err := strconv.ParseUint(strings.TrimPrefix(name, "v"), 10, 64); err == nil && len(name) < 12 {
		for _, e := range es {
			if e.Version == v {
				return e, nil
			}
		}
		return msg.HistoryEntry{}, refused("%s has no version %d in its history (kept: %s)", target, v, versions(es))
	}
	var found []msg.HistoryEntry
	for _, e := range es {
		if name != "" && strings.HasPrefix(e.BundleHash, name) {
			found = append(found, e)
		}
	}
	hashes := map[string]bool{}
	for _, e := range found {
		hashes[e.BundleHash] = true
	}
	switch {
	case len(found) == 0:
		return msg.HistoryEntry{}, refused("%s has no bundle %q in its history (kept: %s)", target, name, versions(es))
	case len(hashes) > 1:
		return msg.HistoryEntry{}, refused("%q names several bundles of %s: %s", name, target, strings.Join(slices.Sorted(maps.Keys(hashes)), ", "))
	}
	// The same bundle at several versions: the newest (es is newest first).
	return found[0], nil
}

func versions(es []msg.HistoryEntry) string {
	if len(es) == 0 {
		return "none"
	}
	var out []string
	for _, e := range es {
		out = append(out, "v"+strconv.FormatUint(e.Version, 10))
	}
	return strings.Join(out, ", ")
}

func (d *deployer) onDiff(ctx context.Context, target string, data []byte) (msg.Message, error) {
	var req msg.DiffRequest
	if err := msg.DecodeRequest(data, &req); err != nil {
		return nil, refused("%v", err)
	}
	es, err := d.targetHistory(ctx, target)
	if err != nil {
		return nil, err
	}
	from, err := resolve(target, req.From, es)
	if err != nil {
		return nil, err
	}
	to, err := resolve(target, req.To, es)
	if err != nil {
		return nil, err
	}
	a, err := d.storedBundle(ctx, target, from)
	if err != nil {
		return nil, err
	}
	b, err := d.storedBundle(ctx, target, to)
	if err != nil {
		return nil, err
	}
	return msg.DiffReply{
		Target: target, FromVersion: from.Version, FromHash: from.BundleHash, ToVersion: to.Version, ToHash: to.BundleHash,
		Files: diffBundles(a, b, from.Version, to.Version),
	}, nil
}

// storedBundle reads an entry's bundle from the store.
func (d *deployer) storedBundle(ctx context.Context, target string, e msg.HistoryEntry) (msg.Bundle, error) {
	b, err := d.bundles.LoadBundle(ctx, e.BundleHash)
	if errors.Is(err, msg.ErrNotStored) {
		return msg.Bundle{}, refused("the bundle of %s v%d (%s) is no longer in the store", target, e.Version, e.BundleHash)
	}
	if err != nil {
		return msg.Bundle{}, msg.Retry(fmt.Errorf("read bundle %s: %w", e.BundleHash, err), time.Second)
	}
	return b, nil
}

func (d *deployer) onRollback(ctx context.Context, target string, data []byte) (msg.Message, error) {
	var req msg.RollbackRequest
	if err := msg.DecodeRequest(data, &req); err != nil {
		return nil, refused("%v (a rollback names the bundle: {\"to\":\"<version or hash>\"})", err)
	}
	es, err := d.targetHistory(ctx, target)
	if err != nil {
		return nil, err
	}
	e, err := resolve(target, req.To, es)
	if err != nil {
		return nil, err
	}
	if !e.OK {
		return nil, refused("%s v%d was refused by validation (%s); only an accepted bundle can be rolled back to", target, e.Version, e.Reason)
	}
	if _, err := d.bundles.StoredAt(ctx, e.BundleHash); errors.Is(err, msg.ErrNotStored) {
		return nil, refused("the bundle of %s v%d (%s) is no longer in the store", target, e.Version, e.BundleHash)
	} else if err != nil {
		return nil, msg.Retry(fmt.Errorf("read bundle %s: %w", e.BundleHash, err), time.Second)
	}
	pin := msg.Pin{Target: target, Version: e.Version, BundleHash: e.BundleHash, Since: time.Now().UTC(), By: req.By, Reason: req.Reason}
	if _, err := d.status.Put(ctx, msg.PinKey(target), mustEncode(pin)); err != nil {
		return nil, msg.Retry(fmt.Errorf("store the pin of %s: %w", target, err), time.Second)
	}
	d.env.Log.InfoContext(ctx, "target pinned", "target", target, "version", e.Version, "bundle", e.BundleHash, "by", req.By, "reason", req.Reason)
	return msg.RollbackReply{Pin: pin, Instances: d.instanceNames(target)}, nil
}

func (d *deployer) onUnpin(ctx context.Context, target string, data []byte) (msg.Message, error) {
	var req msg.UnpinRequest
	if err := msg.DecodeRequest(data, &req); err != nil {
		return nil, refused("%v", err)
	}
	if err := d.knownTarget(target); err != nil {
		return nil, err
	}
	pin, err := d.readPin(ctx, target)
	if err != nil {
		return nil, err
	}
	rep := msg.UnpinReply{Target: target, Lifted: pin, Instances: d.instanceNames(target)}
	if pin != nil {
		if err := d.status.Delete(ctx, msg.PinKey(target)); err != nil {
			return nil, msg.Retry(fmt.Errorf("lift the pin of %s: %w", target, err), time.Second)
		}
		d.env.Log.InfoContext(ctx, "pin lifted", "target", target, "version", pin.Version, "by", req.By)
	}
	vs, err := d.validation(ctx, target)
	if err != nil {
		return nil, err
	}
	rep.Version, rep.BundleHash = vs.LastGoodVersion, vs.LastGood
	return rep, nil
}

// instanceNames names the instances of target this deployer delivers to
// (none: another site's deployer does).
func (d *deployer) instanceNames(target string) []string {
	ins, _ := d.instances.of(target)
	out := []string{}
	for _, in := range ins {
		out = append(out, in.name)
	}
	slices.Sort(out)
	return out
}

// mustEncode encodes a value whose Validate the caller just satisfied.
func mustEncode[T msg.Message](m T) []byte {
	data, err := msg.Encode(m)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", m.Schema(), err))
	}
	return data
}
