package msg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names.
const (
	StreamChanges   = "WEFT_CHANGES"
	StreamRenders   = "WEFT_RENDERS"
	StreamValidated = "WEFT_VALIDATED"
	StreamDeploys   = "WEFT_DEPLOYS"
	StreamDLQ       = "WEFT_DLQ"
)

// StreamPulls and StreamPulled are in pull.go.

// Key-value bucket and object store names.
const (
	BucketResources = "weft-resources"
	BucketStatus    = "weft-status"
	BucketLeases    = "weft-leases"
	BucketVerdicts  = "weft-verdicts"
	BucketConfig    = "weft-config"
	ObjectBundles   = "weft-bundles"
	// BucketHistory indexes the bundles of each target (HistoryEntry
	// under HistoryKey).
	BucketHistory = "weft-history"
)

// BucketPulls is in pull.go.

// DedupWindow is how long JetStream remembers a Nats-Msg-Id.
const DedupWindow = 2 * time.Minute

// streamDefs lists every stream with the subjects it captures.
var streamDefs = []struct {
	name, desc string
	subjects   []string
	maxAge     time.Duration
	// retention: LimitsPolicy unless a stream says otherwise.
	retention jetstream.RetentionPolicy
}{
	{StreamChanges, "resource changes and initial-sync markers from the watcher", []string{ChangeAll, SyncAll}, 24 * time.Hour, jetstream.LimitsPolicy},
	{StreamRenders, "rendered bundles (by hash) with provenance, and render failures", []string{RenderAll}, 7 * 24 * time.Hour, jetstream.LimitsPolicy},
	{StreamValidated, "gathered validation verdicts per bundle", []string{ValidatedAll}, 7 * 24 * time.Hour, jetstream.LimitsPolicy},
	{StreamDeploys, "deploy orders and their outcomes per instance", []string{DeployAll, DeployedAll}, 7 * 24 * time.Hour, jetstream.LimitsPolicy},
	{StreamDLQ, "messages a service could not decode or handle, with the reason", []string{DLQAll}, 30 * 24 * time.Hour, jetstream.LimitsPolicy},
	// A work queue: each order is taken by its node's agent and removed
	// once acknowledged.
	{StreamPulls, "image pull orders, one subject per node", []string{PullAll}, 24 * time.Hour, jetstream.WorkQueuePolicy},
	{StreamPulled, "outcomes of image pull orders per node", []string{PulledAll}, 7 * 24 * time.Hour, jetstream.LimitsPolicy},
}

// Streams returns the configuration of every weft stream at the given
// replica count (1 for a single server, 3 for a cluster).
func Streams(replicas int) []jetstream.StreamConfig {
	out := make([]jetstream.StreamConfig, 0, len(streamDefs))
	for _, s := range streamDefs {
		out = append(out, jetstream.StreamConfig{
			Name:        s.name,
			Description: s.desc,
			Subjects:    s.subjects,
			Retention:   s.retention,
			Storage:     jetstream.FileStorage,
			MaxAge:      s.maxAge,
			MaxMsgSize:  MaxPayload,
			Duplicates:  DedupWindow,
			Replicas:    replicas,
			Discard:     jetstream.DiscardOld,
		})
	}
	return out
}

// KeyValues returns the configuration of every weft key-value bucket.
func KeyValues(replicas int) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: BucketResources, Description: "watched objects by <source>.<type>.<namespace>.<name>", History: 1, Replicas: replicas, Storage: jetstream.FileStorage},
		{Bucket: BucketStatus, Description: "sync, render, validation and deploy status per source, target and instance", History: 5, Replicas: replicas, Storage: jetstream.FileStorage},
		// Keys may carry a TTL of their own (render leases: RenderLeaseTTL;
		// slots of concurrency limits), never longer than LeaseTTL; a key
		// that expires leaves a delete marker, so watchers see it go.
		{Bucket: BucketLeases, Description: "leases: which replica renders a target; heartbeats of validator kinds; slots of concurrency limits", History: 1, TTL: LeaseTTL, LimitMarkerTTL: LeaseTTL, Replicas: replicas, Storage: jetstream.FileStorage},
		{Bucket: BucketConfig, Description: "the active configuration, when it comes from a ConfigMap", History: 5, Replicas: replicas, Storage: jetstream.FileStorage},
		{Bucket: BucketVerdicts, Description: "validation verdicts cached by bundle hash", History: 1, TTL: 7 * 24 * time.Hour, Replicas: replicas, Storage: jetstream.FileStorage},
		{Bucket: BucketPulls, Description: "image pull status per PrePullImage and node", History: 1, Replicas: replicas, Storage: jetstream.FileStorage},
		// A pruned entry is purged with a marker of its own TTL
		// (HistoryMarkerTTL), so pruning leaves nothing behind.
		{Bucket: BucketHistory, Description: "the bundles of each target: verdict and where deployed, by <target>.<version>", History: 1, LimitMarkerTTL: HistoryMarkerTTL, Replicas: replicas, Storage: jetstream.FileStorage},
	}
}

// ObjectStores returns the configuration of every weft object store, the
// bundle store capped at DefaultBundleStoreMaxBytes.
func ObjectStores(replicas int) []jetstream.ObjectStoreConfig {
	return objectStores(replicas, DefaultBundleStoreMaxBytes)
}

func objectStores(replicas int, bundleMaxBytes int64) []jetstream.ObjectStoreConfig {
	return []jetstream.ObjectStoreConfig{
		{Bucket: ObjectBundles, Description: "rendered bundles and candidate configurations by content: descriptions, manifests and content-addressed chunks (BundleStore)", Replicas: replicas, Storage: jetstream.FileStorage, TTL: BundleRetention, MaxBytes: bundleMaxBytes},
	}
}

// DefaultBundleStoreMaxBytes is the size cap of the bundle store unless
// Provision is given another (WithBundleStoreMaxBytes): past it the oldest
// messages go. BundleStore writes again, before the cap can reach them, the
// chunks of what it keeps writing and of every bundle the deployer keeps
// (BundleStore.Refresh).
const DefaultBundleStoreMaxBytes int64 = 1 << 30

// BundleRetention is how long the bundle store keeps a bundle after it was
// last stored: the longest history.max_age. The deployer stores again what
// the bundles it must keep (running, pinned, last accepted) need before
// they are that old (BundleStore.Refresh).
const BundleRetention = 7 * 24 * time.Hour

// HistoryMarkerTTL is how long the marker of a pruned history entry
// stays, for watchers to see it go.
const HistoryMarkerTTL = time.Hour

// LeaseTTL bounds how long a key of the leases bucket lives without being
// written again: a validator replica's heartbeat, and any key without a TTL
// of its own.
const LeaseTTL = 15 * time.Second

// RenderLeaseTTL is how long a render lease outlives its last renewal: a
// replica that dies holding one (killed, cut off) blocks its target for at
// most that long before another replica renders it.
const RenderLeaseTTL = 2 * time.Second

// DeployLeaseTTL is how long a deploy lease outlives its last renewal: an
// order held by a deployer replica that died is carried out by another
// once the lease is over and the order is delivered again.
const DeployLeaseTTL = 1500 * time.Millisecond

// Provisioner is the part of jetstream.JetStream that Provision needs.
type Provisioner interface {
	CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error)
}

// KVStreamConfig is the stream that holds bucket c: the stream nats.go's
// CreateKeyValue makes, except that it does not allow direct gets. A
// direct get may be answered by any replica, one that has not applied the
// latest write too, so a value just written could read as missing or old;
// without it, every read of the bucket (KeyValue.Get, the last message of a
// subject) is answered by the stream's leader, which has. Watches and
// history are unchanged: they are consumers.
func KVStreamConfig(c jetstream.KeyValueConfig) jetstream.StreamConfig {
	history := int64(max(c.History, 1))
	dup := 2 * time.Minute
	if c.TTL > 0 && c.TTL < dup {
		dup = c.TTL
	}
	return jetstream.StreamConfig{
		Name:              KVStream(c.Bucket),
		Description:       c.Description,
		Subjects:          []string{"$KV." + c.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            c.TTL,
		MaxMsgSize:        -1,
		Storage:           c.Storage,
		Replicas:          max(c.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       false,
		Discard:           jetstream.DiscardNew,
		// Per-key TTLs, and a marker where a key expired.
		AllowMsgTTL:            c.LimitMarkerTTL > 0,
		SubjectDeleteMarkerTTL: c.LimitMarkerTTL,
	}
}

// ObjectStreamConfig is the stream that holds object store c, as nats.go's
// CreateObjectStore makes it except for direct gets (see KVStreamConfig):
// an object's description is read from the leader, so one just stored is
// never reported missing. A store with MaxBytes discards its oldest
// messages past it rather than refusing new ones.
func ObjectStreamConfig(c jetstream.ObjectStoreConfig) jetstream.StreamConfig {
	maxBytes, discard := int64(-1), jetstream.DiscardNew
	if c.MaxBytes > 0 {
		maxBytes, discard = c.MaxBytes, jetstream.DiscardOld
	}
	return jetstream.StreamConfig{
		Name:        ObjectStream(c.Bucket),
		Description: c.Description,
		Subjects:    []string{"$O." + c.Bucket + ".C.>", "$O." + c.Bucket + ".M.>"},
		MaxAge:      c.TTL,
		MaxBytes:    maxBytes,
		Storage:     c.Storage,
		Replicas:    max(c.Replicas, 1),
		Discard:     discard,
		AllowRollup: true,
		AllowDirect: false,
	}
}

// ProvisionCallTimeout is the default bound of one JetStream API request of
// Provision: an unanswered request (a NATS node restarting, many processes
// starting together) is retried rather than allowed to use the caller's
// whole budget.
const ProvisionCallTimeout = 5 * time.Second

// ProvisionOption configures Provision.
type ProvisionOption func(*provisionOptions) error

type provisionOptions struct {
	callTimeout time.Duration
	// sites: the hub's (WithSites); site, hubDomain, siteTargets: a
	// site's leaf node (AtSite).
	sites           []string
	site, hubDomain string
	siteTargets     []string
	// sourcesKnown: WithSites or AtSite was given; otherwise the sources
	// a stream has are kept.
	sourcesKnown bool
	// bundleMaxBytes: the size cap of the bundle store.
	bundleMaxBytes int64
}

// WithBundleStoreMaxBytes caps the bundle store (ObjectBundles) at n bytes
// (default DefaultBundleStoreMaxBytes); past it the oldest messages go.
func WithBundleStoreMaxBytes(n int64) ProvisionOption {
	return func(o *provisionOptions) error {
		if n <= 0 {
			return fmt.Errorf("provision: bundle store size cap must be positive, got %d", n)
		}
		o.bundleMaxBytes = n
		return nil
	}
}

// WithCallTimeout bounds each JetStream API request of Provision.
func WithCallTimeout(d time.Duration) ProvisionOption {
	return func(o *provisionOptions) error {
		if d <= 0 {
			return fmt.Errorf("provision: call timeout must be positive, got %v", d)
		}
		o.callTimeout = d
		return nil
	}
}

// Provision creates or updates every stream, bucket and object store (with
// the sources of a hub's sites, WithSites, or of a site, AtSite). Every
// service calls it at start, so any of them can come up first. Each creation
// is one request with its own timeout, retried with backoff until it
// succeeds or ctx is done; an error JetStream gives as final (a replica count
// a single server cannot have, an invalid or conflicting configuration) is
// returned at once.
func Provision(ctx context.Context, js Provisioner, replicas int, opts ...ProvisionOption) error {
	if replicas < 1 {
		return fmt.Errorf("provision: replicas must be >= 1, got %d", replicas)
	}
	o := provisionOptions{callTimeout: ProvisionCallTimeout, bundleMaxBytes: DefaultBundleStoreMaxBytes}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return err
		}
	}
	var errs []error
	for _, c := range Streams(replicas) {
		errs = append(errs, provisionStream(ctx, js, o, "stream "+c.Name, c))
	}
	for _, c := range KeyValues(replicas) {
		errs = append(errs, provisionStream(ctx, js, o, "bucket "+c.Bucket, KVStreamConfig(c)))
	}
	for _, c := range objectStores(replicas, o.bundleMaxBytes) {
		errs = append(errs, provisionStream(ctx, js, o, "object store "+c.Bucket, ObjectStreamConfig(c)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	return nil
}

// provisionStream creates or updates the stream c with its sources.
func provisionStream(ctx context.Context, js Provisioner, o provisionOptions, what string, c jetstream.StreamConfig) error {
	if err := retryUnanswered(ctx, o.callTimeout, what+": sources", func(ctx context.Context) (err error) {
		c, err = o.withSources(ctx, js, c)
		return err
	}, provisionFinal); err != nil {
		return err
	}
	return provisionOne(ctx, o.callTimeout, what, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, c)
		return err
	})
}

// provisionOne runs create until it succeeds, fails for good, or ctx is
// done; then the last error is returned, naming what and how many tries.
func provisionOne(ctx context.Context, callTimeout time.Duration, what string, create func(context.Context) error) error {
	return retryUnanswered(ctx, callTimeout, what, create, provisionFinal)
}

func retryUnanswered(ctx context.Context, callTimeout time.Duration, what string, create func(context.Context) error, final func(error) bool) error {
	delay := 100 * time.Millisecond
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := create(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if final(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			// ctx's own error is wrapped too: a caller stopped while
			// JetStream did not answer sees context.Canceled, not the
			// last try's timeout.
			return fmt.Errorf("%s: %w after %d tries, the last: %w", what, context.Cause(ctx), try, err)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Open runs open (a service looking up the buckets and stores it uses,
// creating its consumers) until it succeeds, fails for good, or ctx is
// done, each try bounded by ProvisionCallTimeout: a service starting while
// a NATS node is down, or while streams elect their leaders, waits for
// JetStream to answer instead of exiting. A bucket, store or stream that
// does not exist is final (Provision makes them), as are the errors
// Provision takes as final.
func Open(ctx context.Context, what string, open func(context.Context) error) error {
	return retryUnanswered(ctx, ProvisionCallTimeout, what, open, func(err error) bool {
		return provisionFinal(err) || errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
	})
}

// provisionFinal reports an error that asking again cannot change.
func provisionFinal(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errReplicasNotSupported, errStreamInvalidConfig, errSubjectsOverlap, errStreamNameInUse:
		return true
	}
	return false
}

// JetStream API error codes Provision takes as final.
const (
	errStreamNameInUse                          = jetstream.JSErrCodeStreamNameInUse // exists with another configuration
	errStreamInvalidConfig  jetstream.ErrorCode = 10052
	errSubjectsOverlap      jetstream.ErrorCode = 10065
	errReplicasNotSupported jetstream.ErrorCode = 10074 // replicas > 1 on a single server
)

// KVStream is the name of the stream that holds a key-value bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// ResourceSubject is the subject a resource key is stored under in the
// bucket's stream. The watcher writes resources by publishing there (with
// the expected last revision, as KV Update does) so that the write carries
// trace context in its headers.
func ResourceSubject(key string) string { return "$KV." + BucketResources + "." + key }

// ResourceKeyOf returns the key of a ResourceSubject.
func ResourceKeyOf(subject string) (string, bool) {
	return strings.CutPrefix(subject, "$KV."+BucketResources+".")
}

// IsWrongLastSequence reports a compare-and-set conflict: a write that named
// an expected last sequence (a KV Create or Update, a publish with
// ExpectLastSequencePerSubject) found another. JetStream uses two codes for
// it, 10071 and, on replicated streams, 10164; both are conflicts.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// IsDuplicateInProcess reports a publish whose message id another publish
// is storing at this very moment (err_code 10158, seen on replicated
// streams when replicas publish the same fact together): neither stored
// nor refused yet, so it is asked again until the stream says which.
func IsDuplicateInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errDuplicateInProcess
}

const errDuplicateInProcess jetstream.ErrorCode = 10158

// FilteredWatcher is what Watch needs of a bucket.
type FilteredWatcher interface {
	WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// Watch is kv.WatchFiltered(ctx, keys, opts...) asked again while
// JetStream does not answer (a NATS node lost, streams electing their
// leaders) until ctx is done, as Open does; a bucket that does not exist
// is final. The watch lives as long as ctx; each try is bounded by the
// client's request timeout. Each try is given its own copy of keys: the
// client writes the bucket's subject prefix into the slice it is given, so
// a try after a failed one would otherwise ask for "$KV.<bucket>.<key>"
// keys and be refused as invalid.
//
// Stop the watcher with StopWatch, not its own Stop.
func Watch(ctx context.Context, kv FilteredWatcher, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	var w jetstream.KeyWatcher
	err := Open(ctx, "watch "+strings.Join(keys, " "), func(context.Context) error {
		var err error
		w, err = kv.WatchFiltered(ctx, slices.Clone(keys), opts...)
		return err
	})
	return w, err
}

// StopWatch stops w and reads what it still delivers until the client
// closes its channel. The client hands each entry over on that channel
// from the subscription's goroutine, under a lock its close needs: an
// entry it was handing over when the reader stopped reading (a full
// channel, a reader gone with its context) would hold that goroutine, and
// the subscription, for the rest of the process. It gives up after
// stopWatchMax.
func StopWatch(w jetstream.KeyWatcher) {
	_ = w.Stop()
	t := time.NewTimer(stopWatchMax)
	defer t.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}

// stopWatchMax bounds how long StopWatch drains a watcher.
const stopWatchMax = 5 * time.Second
