package msg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Schemas of the history, diff, rollback and unpin API and of what it
// stores.
const (
	SchemaHistoryEntry    = "weft.historyentry.v1"
	SchemaPin             = "weft.pin.v1"
	SchemaHistoryRequest  = "weft.historyrequest.v1"
	SchemaHistoryReply    = "weft.history.v1"
	SchemaDiffRequest     = "weft.diffrequest.v1"
	SchemaDiffReply       = "weft.diff.v1"
	SchemaRollbackRequest = "weft.rollbackrequest.v1"
	SchemaRollbackReply   = "weft.rollback.v1"
	SchemaUnpinRequest    = "weft.unpinrequest.v1"
	SchemaUnpinReply      = "weft.unpin.v1"
	SchemaAPIError        = "weft.apierror.v1"
)

// Request subjects of the history API, answered by the deployer (queue
// group APIQueue, any replica): one target per request.
const (
	APIHistoryAll  = Root + ".api.history.*"
	APIDiffAll     = Root + ".api.diff.*"
	APIRollbackAll = Root + ".api.rollback.*"
	APIUnpinAll    = Root + ".api.unpin.*"
)

// APIQueue is the queue group of the weft.api requests the deployer
// answers.
const APIQueue = "weft-api"

// APIHistorySubject asks for a target's history (HistoryRequest, answered
// by a HistoryReply or an APIError).
func APIHistorySubject(target string) string { return join("api", "history", target) }

// APIDiffSubject asks for the difference between two bundles of a target
// (DiffRequest, answered by a DiffReply or an APIError).
func APIDiffSubject(target string) string { return join("api", "diff", target) }

// APIRollbackSubject deploys an accepted bundle of the history to every
// instance of a target and pins it there (RollbackRequest, answered by a
// RollbackReply or an APIError).
func APIRollbackSubject(target string) string { return join("api", "rollback", target) }

// APIUnpinSubject lifts a target's pin and deploys its last accepted
// bundle (UnpinRequest, answered by an UnpinReply or an APIError).
func APIUnpinSubject(target string) string { return join("api", "unpin", target) }

// HistoryKey is the key of one bundle of a target in BucketHistory.
func HistoryKey(target string, version uint64) string {
	return target + "." + strconv.FormatUint(version, 10)
}

// HistoryPrefix starts the keys of every bundle of a target.
func HistoryPrefix(target string) string { return target + "." }

// PinKey is the status-bucket key of a target's pin (Pin); no key: the
// target is not pinned.
func PinKey(target string) string { return "pin." + target }

// HistoryDeploy says an instance ran a bundle: since when (the first
// deploy of it recorded).
type HistoryDeploy struct {
	Instance string    `json:"instance"`
	Site     string    `json:"site,omitempty"`
	At       time.Time `json:"at"`
}

// HistoryEntry is one bundle of a target in BucketHistory: its verdict and
// the instances that ran it. The bundle itself is in ObjectBundles while
// the entry is kept.
type HistoryEntry struct {
	Target     string          `json:"target"`
	Version    uint64          `json:"version"`
	BundleHash string          `json:"bundleHash"`
	RenderedAt time.Time       `json:"renderedAt,omitzero"`
	OK         bool            `json:"ok"`
	Reason     string          `json:"reason,omitempty"`
	VerdictAt  time.Time       `json:"verdictAt"`
	Deployed   []HistoryDeploy `json:"deployed,omitempty"`
}

func (HistoryEntry) Schema() string { return SchemaHistoryEntry }
func (e HistoryEntry) Validate() error {
	if err := need("target", e.Target, "bundleHash", e.BundleHash); err != nil {
		return err
	}
	if e.Version == 0 {
		return fmt.Errorf("%w: version is 0", ErrInvalid)
	}
	return nil
}

// Pin holds a target on a bundle: deployers deliver it, and no other, to
// every instance of the target until the pin is lifted.
type Pin struct {
	Target     string    `json:"target"`
	Version    uint64    `json:"version"`
	BundleHash string    `json:"bundleHash"`
	Since      time.Time `json:"since"`
	By         string    `json:"by,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

func (Pin) Schema() string { return SchemaPin }
func (p Pin) Validate() error {
	if err := need("target", p.Target, "bundleHash", p.BundleHash); err != nil {
		return err
	}
	if p.Version == 0 {
		return fmt.Errorf("%w: version is 0", ErrInvalid)
	}
	return nil
}

// HistoryRequest asks for a target's history; an empty body is one.
type HistoryRequest struct{}

func (HistoryRequest) Schema() string  { return SchemaHistoryRequest }
func (HistoryRequest) Validate() error { return nil }

// HistoryReply lists a target's kept bundles, newest first.
type HistoryReply struct {
	Target  string         `json:"target"`
	Entries []HistoryEntry `json:"entries"`
	// Running maps each instance to the version it runs now.
	Running map[string]uint64 `json:"running,omitempty"`
	// LastGood is the version of the last accepted bundle.
	LastGood uint64 `json:"lastGood,omitempty"`
	Pin      *Pin   `json:"pin,omitempty"`
	Keep     int    `json:"keep"`
	// MaxAge is the history's max_age, in nanoseconds.
	MaxAge time.Duration `json:"maxAgeNs"`
	At     time.Time     `json:"at"`
}

func (HistoryReply) Schema() string    { return SchemaHistoryReply }
func (h HistoryReply) Validate() error { return need("target", h.Target) }

// DiffRequest asks for the difference between bundles From and To of a
// target, each named by version or bundle hash (or a hash's prefix).
type DiffRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func (DiffRequest) Schema() string    { return SchemaDiffRequest }
func (d DiffRequest) Validate() error { return need("from", d.From, "to", d.To) }

// File changes of a FileDiff.
const (
	FileAdded   = "added"
	FileRemoved = "removed"
	FileChanged = "changed"
)

// FileDiff is the change of one file between two bundles: Unified is its
// unified diff (for a file added or removed, against nothing).
type FileDiff struct {
	Path    string `json:"path"`
	Change  string `json:"change"`
	Unified string `json:"unified"`
}

// DiffReply is the difference between two bundles, file by file in path
// order; files that did not change are not listed.
type DiffReply struct {
	Target      string     `json:"target"`
	FromVersion uint64     `json:"fromVersion"`
	FromHash    string     `json:"fromHash"`
	ToVersion   uint64     `json:"toVersion"`
	ToHash      string     `json:"toHash"`
	Files       []FileDiff `json:"files"`
}

func (DiffReply) Schema() string { return SchemaDiffReply }
func (d DiffReply) Validate() error {
	return need("target", d.Target, "fromHash", d.FromHash, "toHash", d.ToHash)
}

// RollbackRequest asks to deploy bundle To (a version or a bundle hash,
// accepted and still in the history) to every instance of the target and
// pin the target there.
type RollbackRequest struct {
	To     string `json:"to"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (RollbackRequest) Schema() string    { return SchemaRollbackRequest }
func (r RollbackRequest) Validate() error { return need("to", r.To) }

// RollbackReply is the pin set and the instances ordered the bundle.
type RollbackReply struct {
	Pin       Pin      `json:"pin"`
	Instances []string `json:"instances"`
}

func (RollbackReply) Schema() string    { return SchemaRollbackReply }
func (r RollbackReply) Validate() error { return r.Pin.Validate() }

// UnpinRequest asks to lift a target's pin; an empty body is one.
type UnpinRequest struct {
	By string `json:"by,omitempty"`
}

func (UnpinRequest) Schema() string  { return SchemaUnpinRequest }
func (UnpinRequest) Validate() error { return nil }

// UnpinReply names the pin lifted (none: the target was not pinned) and
// the bundle ordered instead, the last accepted one.
type UnpinReply struct {
	Target     string   `json:"target"`
	Lifted     *Pin     `json:"lifted,omitempty"`
	Version    uint64   `json:"version"`
	BundleHash string   `json:"bundleHash"`
	Instances  []string `json:"instances"`
}

func (UnpinReply) Schema() string    { return SchemaUnpinReply }
func (u UnpinReply) Validate() error { return need("target", u.Target) }

// APIError answers a weft.api request that could not be served, saying
// why.
type APIError struct {
	Message string `json:"error"`
}

func (APIError) Schema() string    { return SchemaAPIError }
func (e APIError) Validate() error { return need("error", e.Message) }
func (e *APIError) Error() string  { return e.Message }

// DecodeRequest decodes an API request as a person sends it with the NATS
// CLI: an empty body is the zero request, and the schema field may be
// left out (it is checked when given).
func DecodeRequest[T Message](data []byte, into T) error {
	if len(strings.TrimSpace(string(data))) == 0 {
		return into.Validate()
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("decode %s: %w: %v", into.Schema(), ErrMalformed, err)
	}
	if env.Schema == "" {
		if len(data) > MaxPayload {
			return fmt.Errorf("decode %s: %w: %d bytes > %d", into.Schema(), ErrTooLarge, len(data), MaxPayload)
		}
		if err := json.Unmarshal(data, into); err != nil {
			return fmt.Errorf("decode %s: %w: %v", into.Schema(), ErrMalformed, err)
		}
		if err := into.Validate(); err != nil {
			return fmt.Errorf("decode %s: %w", into.Schema(), err)
		}
		return nil
	}
	return Decode(data, into)
}

// DecodeReply decodes the answer to an API request into into; an APIError
// answer is returned as an *APIError.
func DecodeReply[T Message](data []byte, into T) error {
	var env envelope
	if json.Unmarshal(data, &env) == nil && env.Schema == SchemaAPIError {
		var e APIError
		if err := Decode(data, &e); err != nil {
			return err
		}
		return &e
	}
	return Decode(data, into)
}

// IsAPIError reports an error answer of a weft.api request.
func IsAPIError(err error) bool {
	var e *APIError
	return errors.As(err, &e)
}

// Requester is the part of *nats.Conn Ask needs.
type Requester interface {
	RequestMsgWithContext(ctx context.Context, m *nats.Msg) (*nats.Msg, error)
}

// Ask sends req on subject and decodes the answer into into; an answer
// that is an APIError is returned as an *APIError, and no answer as
// nats.ErrNoResponders or the context's error.
func Ask[Req, Rep Message](ctx context.Context, nc Requester, subject string, req Req, into Rep) error {
	m, err := NewMsg(subject, "", req)
	if err != nil {
		return err
	}
	rep, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return DecodeReply(rep.Data, into)
}
