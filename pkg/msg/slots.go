package msg

import (
	"fmt"
	"strconv"
	"strings"
)

// Slots of a concurrency limit are keys of BucketLeases: a limit of n in a
// scope has the keys slot.<scope>.0 to slot.<scope>.<n-1>, each valued with
// the id of the work that holds it. A scope is a path of '/'-separated
// parts ("cluster", "node/<node>", "registry/<host>"); in a key, each part
// is escaped with KeyEscape and the parts are joined with '.', so names
// with dots (registry hosts) stay one token each.

// SlotKeyPrefix starts every slot key.
const SlotKeyPrefix = "slot."

// Slot scopes of image pulls: all of them, those on one node, those from
// one registry host.
const ClusterSlotScope = "cluster"

// NodeSlotScope is the scope of the pulls on one node.
func NodeSlotScope(node string) string { return "node/" + node }

// RegistrySlotScope is the scope of the pulls from one registry host.
func RegistrySlotScope(host string) string { return "registry/" + host }

// CheckSlotScope reports a scope that cannot name slot keys: empty, or with
// an empty part.
func CheckSlotScope(scope string) error {
	if scope == "" {
		return fmt.Errorf("%w: empty slot scope", ErrInvalid)
	}
	for _, p := range strings.Split(scope, "/") {
		if p == "" {
			return fmt.Errorf("%w: slot scope %q has an empty part", ErrInvalid, scope)
		}
	}
	return nil
}

// slotScopeToken is scope as key tokens.
func slotScopeToken(scope string) string {
	parts := strings.Split(scope, "/")
	for i, p := range parts {
		parts[i] = KeyEscape(p)
	}
	return strings.Join(parts, ".")
}

// SlotKey is the key of slot i of scope (CheckSlotScope must accept it).
func SlotKey(scope string, i int) string {
	return SlotKeyPrefix + slotScopeToken(scope) + "." + strconv.Itoa(i)
}

// SlotFilter matches the keys of every slot of scope, and of no other
// scope: a key filter for watching or listing them.
func SlotFilter(scope string) string { return SlotKeyPrefix + slotScopeToken(scope) + ".*" }

// ParseSlotKey returns the scope and index a SlotKey names.
func ParseSlotKey(key string) (scope string, i int, err error) {
	rest, ok := strings.CutPrefix(key, SlotKeyPrefix)
	dot := strings.LastIndexByte(rest, '.')
	if !ok || dot <= 0 {
		return "", 0, fmt.Errorf("%w: %q is no slot key", ErrInvalid, key)
	}
	if i, err = strconv.Atoi(rest[dot+1:]); err != nil || i < 0 {
		return "", 0, fmt.Errorf("%w: slot key %q has no index", ErrInvalid, key)
	}
	parts := strings.Split(rest[:dot], ".")
	for j, p := range parts {
		if parts[j], err = KeyUnescape(p); err != nil {
			return "", 0, err
		}
	}
	scope = strings.Join(parts, "/")
	if err := CheckSlotScope(scope); err != nil {
		return "", 0, err
	}
	return scope, i, nil
}
