package deployer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/lease"
	"github.com/weftio/weft/pkg/svc/pause"
)

// The history of a target is kept in msg.BucketHistory, one entry per
// bundle (msg.HistoryKey): the deployer writes it because it sees every
// fact it holds, the verdict (the verdicts consumer) and the deploys (its
// outcomes). The entries, not the streams, are the index: the streams keep
// everything for 7 days whatever the target's history says, while an entry
// goes, with its bundle, when the history's keep or max_age drops it.

// historyWrites bounds the compare-and-set attempts of one history write
// that other replicas keep changing.
const historyWrites = 10

// updateHistory applies change to the entry of target's version (a new
// entry when there is none: change sees the zero entry) with
// compare-and-set, trying again on a conflict; a change that returns false
// writes nothing.
func (d *deployer) updateHistory(ctx context.Context, target string, version uint64, change func(e *msg.HistoryEntry) bool) error {
	key := msg.HistoryKey(target, version)
	var err error
	for range historyWrites {
		var e msg.HistoryEntry
		var rev uint64
		rev, err = msg.LoadStatus(ctx, d.history, key, &e)
		if err != nil && rev == 0 {
			return msg.Retry(fmt.Errorf("history: %w", err), time.Second)
		}
		// An entry that does not decode is written over.
		if !change(&e) {
			return nil
		}
		if _, err = msg.StoreStatus(ctx, d.history, key, e, rev); err == nil {
			return nil
		}
		if !msg.IsWrongLastSequence(err) && !errors.Is(err, jetstream.ErrKeyExists) {
			break
		}
	}
	return msg.Retry(fmt.Errorf("history: %w", err), 200*time.Millisecond)
}

// recordVerdict enters a verdict in the target's history, with the time
// its bundle was stored (rendered). Recording it again changes nothing.
func (d *deployer) recordVerdict(ctx context.Context, v msg.Validated) error {
	var rendered time.Time
	if at, err := d.bundles.StoredAt(ctx, v.BundleHash); err == nil {
		rendered = at.UTC()
	}
	return d.updateHistory(ctx, v.Target, v.Version, func(e *msg.HistoryEntry) bool {
		if e.BundleHash == v.BundleHash && e.OK == v.OK && e.Reason == v.Reason && !e.VerdictAt.IsZero() {
			return false
		}
		if e.BundleHash == v.BundleHash && canaryRefused(*e) {
			return false // its canary refused it after the validator accepted it
		}
		e.Target, e.Version, e.BundleHash = v.Target, v.Version, v.BundleHash
		e.OK, e.Reason, e.VerdictAt = v.OK, v.Reason, v.At
		if e.RenderedAt.IsZero() {
			e.RenderedAt = rendered
		}
		return true
	})
}

// recordDeploy adds an instance that now runs a bundle to its entry (once:
// the first time it is applied). The entry of a bundle accepted before
// the history was kept is made from the deploy.
func (d *deployer) recordDeploy(ctx context.Context, target string, version uint64, hash string, ran msg.HistoryDeploy) error {
	return d.updateHistory(ctx, target, version, func(e *msg.HistoryEntry) bool {
		if e.BundleHash != "" && e.BundleHash != hash {
			return false // not the bundle the entry names: nothing to say
		}
		if slices.ContainsFunc(e.Deployed, func(h msg.HistoryDeploy) bool { return h.Instance == ran.Instance && h.Site == ran.Site }) {
			return false
		}
		if e.BundleHash == "" {
			e.Target, e.Version, e.BundleHash, e.OK = target, version, hash, true
		}
		e.Deployed = append(e.Deployed, ran)
		slices.SortFunc(e.Deployed, func(a, b msg.HistoryDeploy) int {
			return cmp.Or(strings.Compare(a.Site, b.Site), strings.Compare(a.Instance, b.Instance))
		})
		return true
	})
}

// siteDeploys are the status keys of deploys; at the hub, those of its
// sites are sourced from them.
const siteDeploys = "deploy.>"

// followSiteDeploys records, at the hub, the deploys its sites' deployers
// report in their statuses (sourced into the hub's status bucket): a
// site's own history is the site's, and the hub's history should say
// where each bundle ran too. w replays every current status first, so
// what happened while no hub deployer ran is recorded.
func (d *deployer) followSiteDeploys(ctx context.Context, w jetstream.KeyWatcher) error {
	return d.followKeys(ctx, w, siteDeploys, func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			return
		}
		var st msg.DeployStatus
		if err := msg.Decode(e.Value(), &st); err != nil || st.Site == "" || st.Site == d.env.Site || st.BundleHash == "" || st.Version == 0 {
			return
		}
		if err := d.recordDeploy(ctx, st.Target, st.Version, st.BundleHash, msg.HistoryDeploy{Instance: st.Instance, Site: st.Site, At: st.At}); err != nil {
			d.env.Log.WarnContext(ctx, "a site's deploy not recorded in the history", "target", st.Target, "site", st.Site, "instance", st.Instance, "version", st.Version, "err", err)
		}
	})
}

// readHistory returns every entry of the history bucket by target, newest
// first. Entries that do not decode are skipped.
func (d *deployer) readHistory(ctx context.Context, filter string) (map[string][]msg.HistoryEntry, error) {
	keys, err := d.history.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	out := map[string][]msg.HistoryEntry{}
	for key := range keys.Keys() {
		var e msg.HistoryEntry
		rev, err := msg.LoadStatus(ctx, d.history, key, &e)
		switch {
		case err != nil && rev > 0:
			d.env.Log.WarnContext(ctx, "unreadable history entry skipped", "key", key, "err", err)
			continue
		case err != nil:
			return nil, err
		case rev == 0:
			continue // gone since listed
		}
		out[e.Target] = append(out[e.Target], e)
	}
	for _, es := range out {
		slices.SortFunc(es, func(a, b msg.HistoryEntry) int { return cmp.Compare(b.Version, a.Version) })
	}
	return out, nil
}

// entryAge is how old a history entry is: since its verdict (or its
// render, for an entry made from a deploy).
func entryAge(e msg.HistoryEntry, now time.Time) time.Duration {
	return now.Sub(cmp.Or(e.VerdictAt, e.RenderedAt, now))
}

// historyOf is the history section that applies to target.
func historyOf(cfg *config.Config, target string) config.History {
	if t, ok := cfg.Targets[target]; ok && t.History != nil {
		return *t.History
	}
	if cfg.History != nil {
		return *cfg.History
	}
	return config.History{Keep: config.DefaultHistoryKeep, MaxAge: config.Duration(config.DefaultHistoryMaxAge)}
}

// protectedBundles are the bundles no pruning removes, with why: those an
// instance runs now, pinned ones, and each target's last accepted one and
// those its fast path needs: the base (the last fully accepted bundle),
// the newest pending its whole check and the one being checked whole.
func protectedBundles(rep msg.StatusReport) map[string]string {
	out := map[string]string{}
	for _, t := range rep.Targets {
		if v := t.Validation; v != nil {
			for _, b := range []struct{ hash, why string }{
				{v.Checking, "being checked whole for "},
				{v.Pending, "pending its whole check for "},
				{v.LastFull, "the last fully accepted bundle (the fast path's base) of "},
				{v.LastGood, "the last accepted bundle of "},
			} {
				if b.hash != "" {
					out[b.hash] = b.why + t.Target
				}
			}
		}
		if t.Pin != nil {
			out[t.Pin.BundleHash] = "pinned on " + t.Target
		}
		for _, s := range t.Deploys {
			if s.BundleHash != "" {
				out[s.BundleHash] = "running on " + s.Target + "/" + s.Instance
			}
		}
	}
	return out
}

// pruneResult says what one pass removed.
type pruneResult struct {
	entries []string // history keys removed
	bundles []string // bundles removed from the store
	kept    []string // bundles stored again so the store's age limit and size cap spare them
}

// prune removes, from every target's history, the entries beyond its
// keep or older than its max_age, and their bundles, except the bundles
// protectedBundles names (their entries stay too, so they can be named in
// a rollback); a bundle another kept entry names stays. It re-reads the
// statuses and the history each time: level-based, safe to run twice.
// Protected bundles the store would expire soon are stored again.
func (d *deployer) prune(ctx context.Context, now time.Time) (pruneResult, error) {
	var res pruneResult
	rep, err := msg.ReadStatus(ctx, d.status)
	if err != nil {
		return res, err
	}
	all, err := d.readHistory(ctx, ">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	protected := protectedBundles(rep)
	keptHash := map[string]bool{}
	var drop []msg.HistoryEntry
	for target, es := range all {
		h := historyOf(d.cfg, target)
		for i, e := range es {
			if (i < h.Keep && entryAge(e, now) <= h.MaxAge.D()) || protected[e.BundleHash] != "" {
				keptHash[e.BundleHash] = true
				continue
			}
			drop = append(drop, e)
		}
	}
	for _, e := range drop {
		key := msg.HistoryKey(e.Target, e.Version)
		if err := d.history.Purge(ctx, key, jetstream.PurgeTTL(msg.HistoryMarkerTTL)); err != nil {
			return res, fmt.Errorf("history: prune %s: %w", key, err)
		}
		res.entries = append(res.entries, key)
		if keptHash[e.BundleHash] || slices.Contains(res.bundles, e.BundleHash) {
			continue
		}
		if err := d.bundles.Delete(ctx, e.BundleHash); err != nil {
			return res, fmt.Errorf("history: prune bundle %s: %w", e.BundleHash, err)
		}
		res.bundles = append(res.bundles, e.BundleHash)
	}
	for _, hash := range slices.Sorted(maps.Keys(protected)) {
		kept, err := d.refreshBundle(ctx, hash, now)
		if err != nil {
			d.env.Log.ErrorContext(ctx, "a bundle that must be kept could not be stored again before the store expires it", "bundle", hash, "why", protected[hash], "err", err)
			continue
		}
		if kept {
			res.kept = append(res.kept, hash)
		}
	}
	if len(res.entries)+len(res.kept) > 0 {
		d.env.Log.InfoContext(ctx, "history pruned", "entries", res.entries, "bundles", res.bundles, "stored_again", res.kept)
	}
	return res, nil
}

// refreshBundle stores again, before the store's age limit or size cap
// could take them, the description and the chunks of a bundle that must
// stay (msg.BundleStore.Refresh); it reports whether it wrote anything. A
// chunk of it missing is an error, logged by prune.
func (d *deployer) refreshBundle(ctx context.Context, hash string, now time.Time) (bool, error) {
	wrote, err := d.bundles.Refresh(ctx, hash, now)
	if errors.Is(err, msg.ErrNotStored) {
		return false, nil // nothing left to keep; deploys of it report that
	}
	return wrote, err
}

// pruneEvery is how often a deployer replica looks for history to prune
// (each accepted or refused bundle also asks for a prune: askPrune).
var pruneEvery = 10 * time.Minute

// pruneOnce runs prune if this replica gets the prune lease: one replica
// prunes at a time; the others leave it to that one.
func (d *deployer) pruneOnce(ctx context.Context) {
	l, err := lease.New(d.leases, msg.HistoryPruneLease, d.env.Replica, msg.DeployLeaseTTL, lease.WithKeyTTL(d.env.JS, msg.LeaseSubject(msg.HistoryPruneLease)))
	if err != nil {
		d.env.Log.ErrorContext(ctx, "history prune lease", "err", err)
		return
	}
	if held, _ := l.Try(ctx); !held {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Keep(wctx, cancel) }()
	d.m.prunes.Inc()
	if _, err := d.prune(wctx, time.Now()); err != nil && ctx.Err() == nil {
		d.env.Log.WarnContext(ctx, "history not pruned; tried again later", "err", err)
	}
	cancel()
	<-done
	l.Release()
}

// askPrune asks prunePeriodically for a prune, off the verdict's path:
// verdicts that come while one runs make one more prune, not one each.
func (d *deployer) askPrune() {
	select {
	case d.pruneAsked <- struct{}{}:
	default: // one is asked already
	}
}

// pruneDelay is how long an asked prune waits before it runs: it then
// runs after the deploys of the verdict that asked, not beside them, and
// the verdicts of a steady stream make one prune a pruneDelay, not one
// each (a prune reads every status and history entry and takes a lease:
// run per verdict, it took CPU and round trips from the deploys).
var pruneDelay = time.Second

// prunePeriodically prunes when asked (askPrune), pruneDelay after the
// ask, and every pruneEvery until ctx is done: entries age out without a
// new bundle.
func (d *deployer) prunePeriodically(ctx context.Context) error {
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.pruneAsked:
			if pause.For(ctx, pruneDelay) != nil {
				return nil
			}
			select {
			case <-d.pruneAsked: // asked again meanwhile: this prune covers it
			default:
			}
		}
		d.pruneOnce(ctx)
	}
}
