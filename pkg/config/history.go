package config

import (
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// History says how long a target's bundles are kept to look back at and
// roll back to: the newest Keep bundles not older than MaxAge. A bundle an
// instance runs, the pinned one and the last accepted one are kept
// whatever their age.
type History struct {
	Keep   int      `json:"keep,omitempty"`
	MaxAge Duration `json:"max_age,omitempty"`
}

// Defaults of History.
const (
	DefaultHistoryKeep   = 20
	DefaultHistoryMaxAge = 7 * 24 * time.Hour
)

// historyDefaults fills the global history section and each target's from
// it: a target's section overrides the global one field by field.
func (c *Config) historyDefaults() {
	if c.History == nil {
		c.History = &History{}
	}
	if c.History.Keep == 0 {
		c.History.Keep = DefaultHistoryKeep
	}
	if c.History.MaxAge == 0 {
		c.History.MaxAge = Duration(DefaultHistoryMaxAge)
	}
	for name, t := range c.Targets {
		h := *c.History
		if t.History != nil {
			if t.History.Keep != 0 {
				h.Keep = t.History.Keep
			}
			if t.History.MaxAge != 0 {
				h.MaxAge = t.History.MaxAge
			}
		}
		t.History = &h
		c.Targets[name] = t
	}
}

// checkHistory reports the problems of a history section at f; fields
// equal to inherited's (a target's taken from the global section) are
// reported there, not again.
func checkHistory(ps *problems, f path, h, inherited *History) {
	if h == nil {
		return
	}
	if inherited == nil {
		inherited = &History{Keep: -1 << 31, MaxAge: -1 << 62}
	}
	if h.Keep < 1 && h.Keep != inherited.Keep {
		ps.add(f.k("keep"), "must be at least 1, got %d", h.Keep)
	}
	switch {
	case h.MaxAge == inherited.MaxAge:
	case h.MaxAge <= 0:
		ps.add(f.k("max_age"), "must be positive, got %s", h.MaxAge.D())
	case h.MaxAge.D() > msg.BundleRetention:
		ps.add(f.k("max_age"), "%s is longer than the bundle store keeps bundles (%s)", h.MaxAge.D(), msg.BundleRetention)
	}
}
