package msg

import (
	"errors"
	"fmt"
	"strings"
)

// Root is the first token of every weft subject; `nats sub 'weft.>'` sees all.
const Root = "weft"

// Wildcard subjects, as consumers and auditors subscribe to them.
const (
	AllSubjects      = Root + ".>"
	ChangeAll        = Root + ".change.>"
	SyncAll          = Root + ".sync.>"
	RenderAll        = Root + ".render.>"
	ValidateAll      = Root + ".validate.*"
	ValidatedAll     = Root + ".validated.>"
	DeployAll        = Root + ".deploy.>"
	DeployedAll      = Root + ".deployed.>"
	TriggerAll       = Root + ".trigger.>"
	TriggerRenderAll = Root + ".trigger.render.*"
	TriggerResyncAll = Root + ".trigger.resync.*"
	TriggerDeployAll = Root + ".trigger.deploy.*"
	APIAll           = Root + ".api.>"
	DLQAll           = Root + ".dlq.>"
)

// APIStatus answers with every target's status (a StatusReport).
const APIStatus = Root + ".api.status"

// ErrBadToken reports a name that cannot be used as one subject token.
var ErrBadToken = errors.New("invalid subject token")

// ValidToken checks that s can stand as one token of a subject: non-empty,
// no dots, wildcards or whitespace. Target, source, type and instance names
// are checked with it when the configuration loads.
func ValidToken(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrBadToken)
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f
	}); i >= 0 {
		return fmt.Errorf("%w: %q has %q at %d (use letters, digits, '-' and '_')", ErrBadToken, s, s[i], i)
	}
	return nil
}

// ChangeSubject carries one resource upsert or delete (Change).
func ChangeSubject(source, typ string) string { return join("change", source, typ) }

// SyncSubject marks the initial sync of a watched type complete (Sync).
func SyncSubject(source, typ string) string { return join("sync", source, typ) }

// RenderSubject carries the result of one render of a target (Render).
func RenderSubject(target string) string { return join("render", target) }

// ValidateSubject is the scatter-gather request subject for a target's bundle
// (ValidateRequest, answered by one ValidateReply per validator kind).
func ValidateSubject(target string) string { return join("validate", target) }

// ValidatedSubject carries the gathered verdict on a bundle (Validated).
func ValidatedSubject(target string) string { return join("validated", target) }

// DeploySubject carries a deploy order for one instance (DeployOrder).
func DeploySubject(target, instance string) string { return join("deploy", target, instance) }

// DeployedSubject carries the outcome of a deploy to one instance (Deployed).
func DeployedSubject(target, instance string) string { return join("deployed", target, instance) }

// TriggerRenderSubject forces a render of target (Trigger; an empty body is fine).
func TriggerRenderSubject(target string) string { return join("trigger", "render", target) }

// TriggerResyncSubject forces a full re-read of a source (Trigger).
func TriggerResyncSubject(source string) string { return join("trigger", "resync", source) }

// TriggerDeploySubject forces a re-deploy of a target's last valid bundle (Trigger).
func TriggerDeploySubject(target string) string { return join("trigger", "deploy", target) }

// FetchSubject asks the watcher that runs source for the full body of an
// object kept on demand (FetchRequest, answered by a FetchReply).
func FetchSubject(source string) string { return join("api", "fetch", source) }

// DLQSubject carries what a service could not decode or handle (DeadLetter).
func DLQSubject(service string) string { return join("dlq", service) }

// SubjectToken returns token i (0-based) of subject, or "".
func SubjectToken(subject string, i int) string {
	parts := strings.Split(subject, ".")
	if i < 0 || i >= len(parts) {
		return ""
	}
	return parts[i]
}

func join(tokens ...string) string {
	return Root + "." + strings.Join(tokens, ".")
}
