package validator

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/validator/kind"
)

// Options are a validator process's own settings (not part of weft.yaml:
// they differ between replicas).
type Options struct {
	// Kinds this replica answers for (empty: every kind). Replicas can
	// split the kinds between them; each kind announces itself with a
	// heartbeat, so targets with validate.expect: registered expect it.
	Kinds []string
	// HeartbeatTTL is how long a heartbeat counts; replicas renew theirs
	// every third of it. Default msg.LeaseTTL.
	HeartbeatTTL time.Duration

	// wrapChecker, set by tests only, replaces each served checker.
	wrapChecker func(kind.Checker) kind.Checker
	// pendingSweep, set by tests only, replaces defaultPendingSweep.
	pendingSweep time.Duration
}

// Flags registers --kinds [WEFT_VALIDATOR_KINDS] on fs.
func (o *Options) Flags(fs *flag.FlagSet) {
	fs.Func("kinds", "comma-separated validator kinds this replica answers for (default: all) [WEFT_VALIDATOR_KINDS]", func(s string) error {
		o.Kinds = splitKinds(s)
		return nil
	})
	if v := os.Getenv("WEFT_VALIDATOR_KINDS"); v != "" {
		o.Kinds = splitKinds(v)
	}
}

func splitKinds(s string) []string {
	var out []string
	for k := range strings.SplitSeq(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// check validates o and fills defaults.
func (o Options) check() (Options, error) {
	for _, k := range o.Kinds {
		if !slices.Contains(config.Kinds, k) {
			return o, fmt.Errorf("validator: unknown kind %q (known: %s)", k, strings.Join(config.Kinds, ", "))
		}
	}
	if len(o.Kinds) == 0 {
		o.Kinds = config.Kinds
	}
	switch {
	case o.HeartbeatTTL < 0:
		return o, fmt.Errorf("validator: negative heartbeat TTL %s", o.HeartbeatTTL)
	case o.HeartbeatTTL == 0:
		o.HeartbeatTTL = msg.LeaseTTL
	case o.HeartbeatTTL > msg.LeaseTTL:
		return o, fmt.Errorf("validator: heartbeat TTL %s exceeds the leases bucket's %s", o.HeartbeatTTL, msg.LeaseTTL)
	}
	if o.pendingSweep <= 0 {
		o.pendingSweep = defaultPendingSweep
	}
	return o, nil
}
