package msg

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Schema strings of every message and stored type, in one place. A change
// that breaks readers bumps the major version here.
const (
	SchemaChange        = "weft.change.v1"
	SchemaSync          = "weft.sync.v1"
	SchemaRender        = "weft.render.v1"
	SchemaValidate      = "weft.validate.v1"
	SchemaValidateReply = "weft.validatereply.v1"
	SchemaValidated     = "weft.validated.v1"
	SchemaDeployOrder   = "weft.deploy.v1"
	SchemaDeployed      = "weft.deployed.v1"
	SchemaTrigger       = "weft.trigger.v1"
	SchemaDeadLetter    = "weft.deadletter.v1"
	SchemaBundle        = "weft.bundle.v1"
	SchemaResource      = "weft.resource.v1"
	SchemaSyncStatus    = "weft.syncstatus.v1"
	SchemaRenderStatus  = "weft.renderstatus.v1"
	SchemaValidStatus   = "weft.validationstatus.v1"
	SchemaDeployStatus  = "weft.deploystatus.v1"
	SchemaStatusReport  = "weft.statusreport.v1"
	SchemaConfig        = "weft.config.v1"
	SchemaFetch         = "weft.fetch.v1"
	SchemaFetchReply    = "weft.fetchreply.v1"
	SchemaConfigStatus  = "weft.configstatus.v1"
	SchemaHeartbeat     = "weft.heartbeat.v1"
)

// Op is what happened to a resource.
type Op string

const (
	OpPut    Op = "put"
	OpDelete Op = "delete"
)

// Change is one resource upsert or delete, published on ChangeSubject only
// when the stored content changed. The object itself is in BucketResources
// under Key at Revision; readers re-read it there.
type Change struct {
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Key             string    `json:"key"`
	Op              Op        `json:"op"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	Hash            string    `json:"hash,omitempty"`
	Revision        uint64    `json:"revision"`
	Initial         bool      `json:"initial,omitempty"`
	ObservedAt      time.Time `json:"observedAt"`
}

func (Change) Schema() string { return SchemaChange }
func (c Change) Validate() error {
	if err := need("source", c.Source, "type", c.Type, "key", c.Key, "name", c.Name); err != nil {
		return err
	}
	if c.Op != OpPut && c.Op != OpDelete {
		return fmt.Errorf("%w: op %q is neither put nor delete", ErrInvalid, c.Op)
	}
	if c.Revision == 0 {
		return fmt.Errorf("%w: revision is 0", ErrInvalid)
	}
	return nil
}

// ChangeID is the Nats-Msg-Id of a change: the key at its new revision,
// which only the replica that won the compare-and-set can publish.
func ChangeID(key string, revision uint64) string { return fmt.Sprintf("%s@%d", key, revision) }

// Sync marks the initial listing of one source's type complete.
type Sync struct {
	Source   string    `json:"source"`
	Type     string    `json:"type"`
	Count    int       `json:"count"`
	Revision uint64    `json:"revision"` // BucketResources revision after the listing
	Errors   []string  `json:"errors,omitempty"`
	At       time.Time `json:"at"`
}

func (Sync) Schema() string    { return SchemaSync }
func (s Sync) Validate() error { return need("source", s.Source, "type", s.Type) }

// Resource is how a watched object is stored in BucketResources.
type Resource struct {
	Source          string         `json:"source"`
	Type            string         `json:"type"`
	Namespace       string         `json:"namespace,omitempty"`
	Name            string         `json:"name"`
	ResourceVersion string         `json:"resourceVersion,omitempty"`
	Hash            string         `json:"hash"`
	Origin          string         `json:"origin,omitempty"` // where it came from (file, cluster)
	Object          map[string]any `json:"object"`
}

func (Resource) Schema() string { return SchemaResource }
func (r Resource) Validate() error {
	if err := need("source", r.Source, "type", r.Type, "name", r.Name, "hash", r.Hash); err != nil {
		return err
	}
	if r.Object == nil {
		return fmt.Errorf("%w: object is missing", ErrInvalid)
	}
	return nil
}

// ResourceJSON is a Resource read with its object left as the JSON it was
// written as, for a reader that keeps the object's bytes rather than a
// decoded tree (the renderer's index). It has the Resource's schema; its
// Object shadows the Resource's, which stays nil.
type ResourceJSON struct {
	Resource
	Object json.RawMessage `json:"object"`
}

func (r ResourceJSON) Validate() error {
	if err := need("source", r.Source, "type", r.Type, "name", r.Name, "hash", r.Hash); err != nil {
		return err
	}
	if len(r.Object) == 0 || r.Object[0] != '{' {
		return fmt.Errorf("%w: object is missing or not an object", ErrInvalid)
	}
	return nil
}

// TemplateError locates a template failure.
type TemplateError struct {
	Template string `json:"template"`
	Line     int    `json:"line,omitempty"`
	Message  string `json:"message"`
}

// ResourceError is an error a template registered against one resource
// (register_error) without failing the render.
type ResourceError struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Message string `json:"message"`
}

// Provenance names the state a bundle was rendered from.
type Provenance struct {
	// StateRevision is the highest BucketResources revision applied.
	StateRevision uint64 `json:"stateRevision"`
	// Counts is the number of objects per watched type.
	Counts map[string]int `json:"counts,omitempty"`
	// Cause is the subject or reason that triggered this render.
	Cause string `json:"cause,omitempty"`
	// Trigger is the trigger that forced this render (Cause "trigger"):
	// its reason and who sent it, as it said.
	Trigger *Trigger `json:"trigger,omitempty"`
	// Changed lists the watched objects (and values) that changed between
	// the target's previous render and this one, by key, at most
	// MaxProvenanceChanged of them (ChangedMore counts the others). Empty
	// when the renderer does not know the previous render's state (its
	// first render since it started); the changes are then only in
	// StreamChanges, between the two renders' state revisions.
	Changed     []ObjectChange `json:"changed,omitempty"`
	ChangedMore int            `json:"changedMore,omitempty"`
}

// MaxProvenanceChanged bounds Provenance.Changed, and MaxChangedFields
// ObjectChange.Fields, so a render message stays small whatever changed.
const (
	MaxProvenanceChanged = 32
	MaxChangedFields     = 8
)

// ObjectChange is one object that changed between two renders of a target:
// its last revision and op, and the field paths (top level, and one level
// into objects: "spec.rules", "endpoints") whose values differ between the
// object the previous render read and the one this render read.
type ObjectChange struct {
	Type      string `json:"type"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Op        Op     `json:"op"`
	Revision  uint64 `json:"revision"`
	// Created: the previous render did not see the object (Fields is then
	// empty).
	Created    bool     `json:"created,omitempty"`
	Fields     []string `json:"fields,omitempty"`
	FieldsMore int      `json:"fieldsMore,omitempty"`
}

// Render is the result of one render of a target: either a bundle (stored in
// ObjectBundles under BundleHash) or a Failure. Version grows by one for
// every published render of the target.
type Render struct {
	Target     string          `json:"target"`
	Version    uint64          `json:"version"`
	BundleHash string          `json:"bundleHash,omitempty"`
	Files      []FileRef       `json:"files,omitempty"`
	Provenance Provenance      `json:"provenance"`
	Errors     []ResourceError `json:"errors,omitempty"`
	Failure    *TemplateError  `json:"failure,omitempty"`
	RenderTime time.Duration   `json:"renderTimeNs"`
	At         time.Time       `json:"at"`
}

func (Render) Schema() string { return SchemaRender }
func (r Render) Validate() error {
	if err := need("target", r.Target); err != nil {
		return err
	}
	if r.Version == 0 {
		return fmt.Errorf("%w: version is 0", ErrInvalid)
	}
	if (r.BundleHash == "") == (r.Failure == nil) {
		return fmt.Errorf("%w: a render has exactly one of bundleHash and failure", ErrInvalid)
	}
	return nil
}

// RenderID is the Nats-Msg-Id of a render.
func RenderID(target string, version uint64) string { return fmt.Sprintf("%s@%d", target, version) }

// DeployedID is the message id of the outcome of the deploy order with
// stream sequence order: an outcome published again for the same order is
// dropped as a duplicate.
func DeployedID(target, instance string, order uint64) string {
	return fmt.Sprintf("%s.%s#%d", target, instance, order)
}

// ValidateRequest asks every validator kind for its verdict on a bundle,
// or on a candidate configuration (ConfigHash: a Config in ObjectBundles
// under ConfigObject(hash); Target is then ConfigTarget).
type ValidateRequest struct {
	Target     string `json:"target"`
	Version    uint64 `json:"version"`
	BundleHash string `json:"bundleHash,omitempty"`
	ConfigHash string `json:"configHash,omitempty"`
	// Kinds are the kinds the requester waits for; the others do not
	// check (empty: every kind answers).
	Kinds []string `json:"kinds,omitempty"`
	// DryRunObject marks a dry run (the validating admission webhook): the
	// bundle of BundleHash is the object of this name in ObjectBundles
	// (DryRunObjectName), removed once the requester has its answers. No
	// verdict on a dry run is cached, published or kept in a status.
	DryRunObject string `json:"dryRunObject,omitempty"`
	// Base names the target's last bundle that every kind fully accepted
	// (ValidationStatus.LastFull). A kind that can prove the bundle valid
	// from what changed since Base (the haproxy kind: runtime values only)
	// may answer provisionally (ValidateReply.Provisional) instead of
	// checking it whole. Empty: every kind checks the whole bundle.
	Base string `json:"base,omitempty"`
	// Confirm marks the whole check that follows a provisional acceptance
	// (the second verdict): the bundle is deployed already, so a kind
	// runs it behind the checks a deploy waits for (haproxy -c at a low
	// CPU priority).
	Confirm bool `json:"confirm,omitempty"`
}

// DryRunObjectName is the object store name of the bundle of one dry run
// (id: the admission request's uid and the target).
func DryRunObjectName(id string) string { return "dryrun-" + id }

// BundleObject is the object store name the request's bundle is read from.
func (v ValidateRequest) BundleObject() string {
	if v.DryRunObject != "" {
		return v.DryRunObject
	}
	return v.BundleHash
}

// Wants reports whether kind is asked to answer.
func (v ValidateRequest) Wants(kind string) bool {
	return len(v.Kinds) == 0 || slices.Contains(v.Kinds, kind)
}

// ConfigTarget is the target token of configuration validation requests.
const ConfigTarget = "_config"

func (ValidateRequest) Schema() string { return SchemaValidate }
func (v ValidateRequest) Validate() error {
	if err := need("target", v.Target); err != nil {
		return err
	}
	if (v.BundleHash == "") == (v.ConfigHash == "") {
		return fmt.Errorf("%w: a validation request names exactly one of bundleHash and configHash", ErrInvalid)
	}
	if v.DryRunObject != "" && v.BundleHash == "" {
		return fmt.Errorf("%w: a dry run validates a bundle (bundleHash)", ErrInvalid)
	}
	return nil
}

// Problem is one finding of a validator.
type Problem struct {
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Severity string `json:"severity,omitempty"` // "error" (default) or "warning"
	Message  string `json:"message"`
}

// ValidateReply is one validator kind's answer.
type ValidateReply struct {
	Kind     string        `json:"kind"`
	Replica  string        `json:"replica,omitempty"`
	OK       bool          `json:"ok"`
	Problems []Problem     `json:"problems,omitempty"`
	Error    string        `json:"error,omitempty"` // the validator could not decide
	Duration time.Duration `json:"durationNs"`
	// Provisional: OK was proven from the values that changed since the
	// request's Base, not by the kind's whole check, which is still due.
	Provisional bool `json:"provisional,omitempty"`
}

func (ValidateReply) Schema() string    { return SchemaValidateReply }
func (v ValidateReply) Validate() error { return need("kind", v.Kind) }

// Validated is the gathered verdict on one bundle. OK is true only when
// every expected kind answered and accepted it.
type Validated struct {
	Target     string          `json:"target"`
	Version    uint64          `json:"version"`
	BundleHash string          `json:"bundleHash"`
	OK         bool            `json:"ok"`
	Replies    []ValidateReply `json:"replies,omitempty"`
	Missing    []string        `json:"missing,omitempty"` // expected kinds that did not answer
	Reason     string          `json:"reason,omitempty"`
	Cached     bool            `json:"cached,omitempty"`
	At         time.Time       `json:"at"`
	// Provisional: accepted, with a kind's whole check still due (a reply
	// was provisional); a later verdict with Refutes withdraws it.
	Provisional bool `json:"provisional,omitempty"`
	// Refutes: the whole check refused this bundle, which an earlier
	// provisional verdict accepted. The validation status then names the
	// last fully accepted bundle as LastGood, which the deployer orders
	// back.
	Refutes bool `json:"refutes,omitempty"`
}

func (Validated) Schema() string { return SchemaValidated }
func (v Validated) Validate() error {
	if err := need("target", v.Target, "bundleHash", v.BundleHash); err != nil {
		return err
	}
	if !v.OK && v.Reason == "" {
		return fmt.Errorf("%w: a refusal needs a reason", ErrInvalid)
	}
	return nil
}

// DeployOrder asks the deployer to bring one instance to a bundle.
type DeployOrder struct {
	Target     string `json:"target"`
	Instance   string `json:"instance"`
	Version    uint64 `json:"version"`
	BundleHash string `json:"bundleHash"`
	Reason     string `json:"reason,omitempty"` // OrderValidated, OrderTrigger, ... (the Order constants)
}

// Why a deploy order was given (DeployOrder.Reason).
const (
	OrderValidated = "validated" // a bundle was accepted
	// OrderTrigger: weft.trigger.deploy.<target> asked to re-apply.
	OrderTrigger = "trigger"
	// OrderDriftCheck: the periodic re-apply that repairs drift.
	OrderDriftCheck = "drift-check"
	// OrderCatchUp: a starting deployer re-applies the last accepted bundle
	// to every instance, which brings up to date one that is behind (new
	// instance, lost order) and repairs one whose files or program changed
	// while no deployer ran.
	OrderCatchUp = "catch-up"
	// OrderRollback: a pin was set (weft rollback); the order names the
	// pinned bundle, whatever the instance has.
	OrderRollback = "rollback"
	// OrderUnpin: a pin was lifted; the order names the last accepted
	// bundle.
	OrderUnpin = "unpin"
	// OrderRefuted: a provisionally accepted bundle was refused by the
	// whole check; the order names the last fully accepted bundle.
	OrderRefuted = "refuted"
	// OrderCanary: a canary instance gets an accepted bundle before the
	// rest (deploy.canary).
	OrderCanary = "canary"
	// OrderCanaryPassed: the canary passed; the rest get the bundle.
	OrderCanaryPassed = "canary-passed"
	// OrderCanaryRollback: the canary was refused; a canary goes back to
	// the previous bundle, whatever it has.
	OrderCanaryRollback = "canary-rollback"
)

// Reapply reports whether the order re-applies what the instance should
// already have; such orders are never skipped as old.
func (d DeployOrder) Reapply() bool {
	return d.Reason == OrderTrigger || d.Reason == OrderDriftCheck
}

func (DeployOrder) Schema() string { return SchemaDeployOrder }
func (d DeployOrder) Validate() error {
	return need("target", d.Target, "instance", d.Instance, "bundleHash", d.BundleHash)
}

// Deploy outcomes.
const (
	OutcomeApplied   = "applied"
	OutcomeUnchanged = "unchanged"
	OutcomeSkipped   = "skipped" // an older bundle than the one deployed, or the one it has
	OutcomeFailed    = "failed"
)

// Deployed is the outcome of one deploy order.
type Deployed struct {
	Target       string        `json:"target"`
	Instance     string        `json:"instance"`
	Version      uint64        `json:"version"`
	BundleHash   string        `json:"bundleHash"`
	Driver       string        `json:"driver"`
	Outcome      string        `json:"outcome"`
	Written      []string      `json:"written,omitempty"`
	Removed      []string      `json:"removed,omitempty"`
	Reloaded     bool          `json:"reloaded"`
	ReloadReason string        `json:"reloadReason,omitempty"`
	RuntimeOps   []string      `json:"runtimeOps,omitempty"` // changes applied without a reload
	Error        string        `json:"error,omitempty"`
	Duration     time.Duration `json:"durationNs"`
	At           time.Time     `json:"at"`
	// Attempt, on a failed outcome of an order that is retried (the
	// order not carried out), counts its failed attempts so far.
	Attempt uint64 `json:"attempt,omitempty"`
}

func (Deployed) Schema() string { return SchemaDeployed }
func (d Deployed) Validate() error {
	return need("target", d.Target, "instance", d.Instance, "outcome", d.Outcome)
}

// Trigger is a manual request (render, resync, deploy). An empty payload is
// a valid trigger, so `nats pub weft.trigger.render.<target> ”` works.
type Trigger struct {
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
}

func (Trigger) Schema() string  { return SchemaTrigger }
func (Trigger) Validate() error { return nil }

// DecodeTrigger decodes a trigger, accepting an empty payload.
func DecodeTrigger(data []byte) (Trigger, error) {
	var t Trigger
	if len(data) == 0 {
		return t, nil
	}
	return t, Decode(data, &t)
}

// DeadLetter records a message a service could not decode or handle.
type DeadLetter struct {
	Service  string            `json:"service"`
	Subject  string            `json:"subject"`
	Stream   string            `json:"stream,omitempty"`
	Sequence uint64            `json:"sequence,omitempty"`
	Reason   string            `json:"reason"`
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  []byte            `json:"payload,omitempty"` // at most DeadLetterPayloadMax bytes
	Size     int               `json:"size"`
	At       time.Time         `json:"at"`
}

// DeadLetterPayloadMax bounds the copy of the payload kept in a DeadLetter.
const DeadLetterPayloadMax = 64 << 10

func (DeadLetter) Schema() string { return SchemaDeadLetter }
func (d DeadLetter) Validate() error {
	return need("service", d.Service, "subject", d.Subject, "reason", d.Reason)
}

// SyncStatus is the initial-sync marker of a source's type in BucketStatus.
type SyncStatus struct {
	Source   string    `json:"source"`
	Type     string    `json:"type"`
	Synced   bool      `json:"synced"`
	Count    int       `json:"count"`
	Revision uint64    `json:"revision"`
	Errors   []string  `json:"errors,omitempty"`
	At       time.Time `json:"at"`
}

func (SyncStatus) Schema() string    { return SchemaSyncStatus }
func (s SyncStatus) Validate() error { return need("source", s.Source, "type", s.Type) }

// RenderStatus is a target's last render in BucketStatus.
type RenderStatus struct {
	Target      string          `json:"target"`
	Version     uint64          `json:"version"`
	BundleHash  string          `json:"bundleHash,omitempty"` // last good bundle
	Provenance  Provenance      `json:"provenance"`
	Errors      []ResourceError `json:"errors,omitempty"`
	LastError   string          `json:"lastError,omitempty"`
	LastErrorAt time.Time       `json:"lastErrorAt,omitzero"`
	At          time.Time       `json:"at"`
}

func (RenderStatus) Schema() string    { return SchemaRenderStatus }
func (s RenderStatus) Validate() error { return need("target", s.Target) }

// ValidationStatus is a target's last verdict in BucketStatus.
type ValidationStatus struct {
	Target     string `json:"target"`
	Version    uint64 `json:"version"`
	BundleHash string `json:"bundleHash"`
	OK         bool   `json:"ok"`
	// Undecided: the kinds have not given a verdict on Version yet (some
	// did not answer or could not read the bundle); it is asked again.
	Undecided bool      `json:"undecided,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Problems  []Problem `json:"problems,omitempty"`
	// LastGood is the hash of the newest bundle that passed.
	LastGood        string    `json:"lastGood,omitempty"`
	LastGoodVersion uint64    `json:"lastGoodVersion,omitempty"`
	At              time.Time `json:"at"`
	// LastFull is the hash of the newest bundle every kind accepted by its
	// whole check (no provisional reply): the base of the next fast-path
	// request.
	LastFull        string `json:"lastFull,omitempty"`
	LastFullVersion uint64 `json:"lastFullVersion,omitempty"`
	// Pending is the newest provisionally accepted bundle whose whole
	// check is still due (PendingVersion its version).
	Pending        string `json:"pending,omitempty"`
	PendingVersion uint64 `json:"pendingVersion,omitempty"`
	// Checking is the provisionally accepted bundle whose whole check is
	// running (CheckingVersion its version): named from when it was still
	// Pending until its verdict is recorded, so that it is kept in the
	// bundle store while newer bundles become pending, and is there to be
	// the base (LastFull) once accepted.
	Checking        string `json:"checking,omitempty"`
	CheckingVersion uint64 `json:"checkingVersion,omitempty"`
	// FullOnly: a provisional acceptance was refuted; every render is
	// checked whole until one is fully accepted.
	FullOnly bool `json:"fullOnly,omitempty"`
}

func (ValidationStatus) Schema() string    { return SchemaValidStatus }
func (s ValidationStatus) Validate() error { return need("target", s.Target) }

// DeployStatus is one instance's deploy state in BucketStatus.
type DeployStatus struct {
	Target      string           `json:"target"`
	Instance    string           `json:"instance"`
	Driver      string           `json:"driver"`
	Version     uint64           `json:"version"`
	BundleHash  string           `json:"bundleHash,omitempty"`
	Deploys     uint64           `json:"deploys"`
	Reloads     map[string]int64 `json:"reloads,omitempty"` // by reason
	RuntimeOps  uint64           `json:"runtimeOps,omitempty"`
	LastError   string           `json:"lastError,omitempty"`
	LastErrorAt time.Time        `json:"lastErrorAt,omitzero"`
	At          time.Time        `json:"at"`
	// Order is the stream sequence of the last deploy order carried out:
	// an order delivered again after a deployer died before acknowledging
	// it is not carried out twice.
	Order uint64 `json:"order,omitempty"`
	// Failures counts the failed attempts, in a row, of an order the
	// deployer keeps retrying (LastError says why); 0 once one succeeds.
	Failures uint64 `json:"failures,omitempty"`
	// Site names the site whose deployer writes this status (empty: the
	// hub's); the hub sources the statuses of its sites.
	Site string `json:"site,omitempty"`
}

func (DeployStatus) Schema() string { return SchemaDeployStatus }
func (s DeployStatus) Validate() error {
	return need("target", s.Target, "instance", s.Instance)
}

// Config is a candidate or active weft configuration (weft.yaml text), as
// stored in BucketConfig and ObjectBundles.
type Config struct {
	Hash   string    `json:"hash"`
	YAML   string    `json:"yaml"`
	Origin string    `json:"origin,omitempty"` // e.g. configmap kube-system/weft
	At     time.Time `json:"at"`
}

func (Config) Schema() string    { return SchemaConfig }
func (c Config) Validate() error { return need("hash", c.Hash, "yaml", c.YAML) }

// ConfigObject is the object store name of a candidate configuration.
func ConfigObject(hash string) string { return "config-" + hash }

// ConfigStatus is the state of configuration from a ConfigMap: the last
// candidate, its verdict, and the configuration running.
type ConfigStatus struct {
	Candidate string    `json:"candidate"`
	OK        bool      `json:"ok"`
	Problems  []Problem `json:"problems,omitempty"`
	Active    string    `json:"active,omitempty"`
	Origin    string    `json:"origin,omitempty"`
	At        time.Time `json:"at"`
}

func (ConfigStatus) Schema() string    { return SchemaConfigStatus }
func (s ConfigStatus) Validate() error { return need("candidate", s.Candidate) }

// FetchRequest asks for the full body of an on-demand object.
type FetchRequest struct {
	Type      string `json:"type"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (FetchRequest) Schema() string    { return SchemaFetch }
func (f FetchRequest) Validate() error { return need("type", f.Type, "name", f.Name) }

// FetchReply carries the object, or why it could not be fetched.
type FetchReply struct {
	Object map[string]any `json:"object,omitempty"`
	Error  string         `json:"error,omitempty"`
}

func (FetchReply) Schema() string { return SchemaFetchReply }
func (f FetchReply) Validate() error {
	if (f.Object == nil) == (f.Error == "") {
		return fmt.Errorf("%w: a fetch reply has exactly one of object and error", ErrInvalid)
	}
	return nil
}

// TargetReport is everything known about one target.
type TargetReport struct {
	Target     string            `json:"target"`
	Render     *RenderStatus     `json:"render,omitempty"`
	Validation *ValidationStatus `json:"validation,omitempty"`
	Deploys    []DeployStatus    `json:"deploys,omitempty"`
	// Pin is the bundle the target is held on (weft rollback), if any.
	Pin *Pin `json:"pin,omitempty"`
	// Canary is the target's last canary (deploy.canary), if any.
	Canary *Canary `json:"canary,omitempty"`
}

// StatusReport answers APIStatus and `weft status`.
type StatusReport struct {
	Config  *ConfigStatus  `json:"config,omitempty"`
	Syncs   []SyncStatus   `json:"syncs,omitempty"`
	Targets []TargetReport `json:"targets"`
	// Pulls are the per-node pull statuses of the puller not yet Pulled
	// (Pending, Pulling, Failed), from BucketPulls (ReadPulls).
	Pulls []PullStatus `json:"pulls,omitempty"`
	// Sites are the links to the hub's sites (ReadSites), by name.
	Sites []SiteStatus `json:"sites,omitempty"`
	At    time.Time    `json:"at"`
}

func (StatusReport) Schema() string  { return SchemaStatusReport }
func (StatusReport) Validate() error { return nil }

// need checks that the named string fields are set: need("a", a, "b", b).
func need(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			return fmt.Errorf("%w: %s is missing", ErrInvalid, pairs[i])
		}
	}
	return nil
}

// Heartbeat says a replica serves a validator kind. Each kind's replicas
// renew theirs in the leases bucket (KindHeartbeatKey) every third of the
// bucket's TTL; the gatherer expects the kinds that have one.
type Heartbeat struct {
	Kind    string    `json:"kind"`
	Replica string    `json:"replica"`
	At      time.Time `json:"at"`
}

func (Heartbeat) Schema() string { return SchemaHeartbeat }
func (h Heartbeat) Validate() error {
	return need("kind", h.Kind, "replica", h.Replica)
}
