package msg

import (
	"fmt"
	"time"
)

// SchemaCanary is the schema of a target's canary record (CanaryKey).
const SchemaCanary = "weft.canary.v1"

// CanaryKey is the status-bucket key of a target's canary record (Canary):
// the last bundle that went to the canary instances first, and its verdict.
func CanaryKey(target string) string { return "canary." + target }

// CanaryLeaseKey is the leases-bucket key held by the deployer replica
// judging a target's canary, so one replica judges at a time.
func CanaryLeaseKey(target string) string { return "canary." + target }

// Phases of a canary (Canary.Phase).
const (
	// CanaryDeploying: the canary instances are being given the bundle;
	// the hold starts once every one of them runs it.
	CanaryDeploying = "deploying"
	// CanaryHolding: every canary runs the bundle; HAProxy's view of them
	// is compared with the one before the deploy at the end of the hold.
	CanaryHolding = "holding"
	// CanaryPassed: the rest of the instances get the bundle.
	CanaryPassed = "passed"
	// CanaryRefused: the canaries are rolled back to the previous bundle;
	// the rest never get this one.
	CanaryRefused = "refused"
)

// CanaryCounters are the responses a frontend or backend sent, and how many
// of them were 5xx, since its HAProxy worker started.
type CanaryCounters struct {
	Responses uint64 `json:"responses"`
	Err5xx    uint64 `json:"err5xx"`
}

// CanaryStats is HAProxy's view of one instance at one moment ("show
// stat" on its Runtime API).
type CanaryStats struct {
	At time.Time `json:"at"`
	// Proxies are the counters of every frontend and backend, keyed
	// "frontend/<name>" and "backend/<name>".
	Proxies map[string]CanaryCounters `json:"proxies,omitempty"`
	// Servers are the status of every server ("UP", "DOWN", "MAINT",
	// "no check", ...), keyed "<backend>/<server>".
	Servers map[string]string `json:"servers,omitempty"`
}

// CanaryInstance is one canary instance and what was seen of it.
type CanaryInstance struct {
	Instance string `json:"instance"`
	// Before is HAProxy's view before the bundle was deployed; Start the
	// one when the hold started (nil: not seen, see Unobserved).
	Before *CanaryStats `json:"before,omitempty"`
	Start  *CanaryStats `json:"start,omitempty"`
	// Unobserved says why HAProxy's view is not used (a driver without a
	// Runtime API view, an unreachable socket): the instance is then
	// judged by the deploy outcome alone.
	Unobserved string `json:"unobserved,omitempty"`
}

// Canary is a target's canary record: a bundle deployed first to some
// instances, watched for a hold, then deployed to the rest or rolled back.
type Canary struct {
	Target     string `json:"target"`
	Version    uint64 `json:"version"`
	BundleHash string `json:"bundleHash"`
	// Previous is the bundle the other instances keep meanwhile, and the
	// one the canaries go back to if the bundle is refused (0: none).
	PreviousVersion uint64           `json:"previousVersion,omitempty"`
	PreviousHash    string           `json:"previousHash,omitempty"`
	Instances       []CanaryInstance `json:"instances"`
	// Hold is how long the canaries are watched, in nanoseconds.
	Hold      time.Duration `json:"hold"`
	StartedAt time.Time     `json:"startedAt"`
	// HoldFrom is when every canary ran the bundle (zero: not yet).
	HoldFrom  time.Time `json:"holdFrom,omitzero"`
	Phase     string    `json:"phase"`
	Reason    string    `json:"reason,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Ordered says the orders that follow the verdict (the rest, or the
	// canaries' rollback) were given.
	Ordered bool `json:"ordered,omitempty"`
}

func (Canary) Schema() string { return SchemaCanary }
func (c Canary) Validate() error {
	if err := need("target", c.Target, "bundleHash", c.BundleHash, "phase", c.Phase); err != nil {
		return err
	}
	if c.Version == 0 {
		return fmt.Errorf("%w: version is 0", ErrInvalid)
	}
	return nil
}

// Decided reports whether the canary has its verdict.
func (c Canary) Decided() bool { return c.Phase == CanaryPassed || c.Phase == CanaryRefused }

// IsCanary reports whether instance is one of the canaries.
func (c Canary) IsCanary(instance string) bool {
	for _, in := range c.Instances {
		if in.Instance == instance {
			return true
		}
	}
	return false
}

// Released is the bundle every instance may run once this canary is over
// or while a newer one is not started yet: its bundle if it passed, else
// the previous one (version 0: none).
func (c Canary) Released() (uint64, string) {
	if c.Phase == CanaryPassed {
		return c.Version, c.BundleHash
	}
	return c.PreviousVersion, c.PreviousHash
}

// For is the bundle instance should run under this canary, when the
// canary is about the bundle version (the last accepted one): the bundle
// on a canary or after a pass, the previous one otherwise. For a record
// about another bundle, the one it released.
func (c Canary) For(instance string, version uint64) (uint64, string) {
	if c.Version != version {
		return c.Released()
	}
	if c.Phase == CanaryPassed || (!c.Decided() && c.IsCanary(instance)) {
		return c.Version, c.BundleHash
	}
	return c.PreviousVersion, c.PreviousHash
}

// HoldLeft is how much of the hold is left at now (0 once over or while
// the hold has not started).
func (c Canary) HoldLeft(now time.Time) time.Duration {
	if c.HoldFrom.IsZero() || c.Decided() {
		return 0
	}
	return max(c.HoldFrom.Add(c.Hold).Sub(now), 0)
}
