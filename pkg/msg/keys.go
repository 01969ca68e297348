package msg

import (
	"fmt"
	"strings"
)

// ClusterScope stands for the empty namespace of cluster-scoped objects in keys.
const ClusterScope = "_"

// ResourceKey is the key of one watched object in BucketResources:
// <source>.<type>.<namespace>.<name>, each part escaped with KeyEscape.
func ResourceKey(source, typ, namespace, name string) string {
	ns := ClusterScope
	if namespace != "" {
		ns = KeyEscape(namespace)
	}
	return source + "." + typ + "." + ns + "." + KeyEscape(name)
}

// ResourcePrefix is the key prefix of every object of one source and type.
func ResourcePrefix(source, typ string) string { return source + "." + typ + "." }

// ParseResourceKey splits a ResourceKey into its parts.
func ParseResourceKey(key string) (source, typ, namespace, name string, err error) {
	parts := strings.Split(key, ".")
	if len(parts) != 4 {
		return "", "", "", "", fmt.Errorf("%w: resource key %q does not have 4 parts", ErrInvalid, key)
	}
	if parts[2] != ClusterScope {
		if namespace, err = KeyUnescape(parts[2]); err != nil {
			return "", "", "", "", err
		}
	}
	if name, err = KeyUnescape(parts[3]); err != nil {
		return "", "", "", "", err
	}
	return parts[0], parts[1], namespace, name, nil
}

// Status keys in BucketStatus.
func SyncStatusKey(source, typ string) string        { return "sync." + source + "." + typ }
func RenderStatusKey(target string) string           { return "render." + target }
func ValidationStatusKey(target string) string       { return "validate." + target }
func DeployStatusKey(target, instance string) string { return "deploy." + target + "." + instance }
func DeployStatusPrefix(target string) string        { return "deploy." + target + "." }
func RenderLeaseKey(target string) string            { return "render." + target }

// DeployLeaseKey is the leases-bucket key held by the deployer replica
// carrying out an order for one instance.
func DeployLeaseKey(target, instance string) string { return "deploy." + target + "." + instance }

// HistoryPruneLease is the leases-bucket key held by the deployer replica
// pruning the history, so one replica prunes at a time.
const HistoryPruneLease = "prune.history"

// IngressStatusLeaseKey is the leases-bucket key held by the watcher
// replica that writes the status of the Ingresses a target serves.
func IngressStatusLeaseKey(target string) string { return "ingress-status." + target }

// GatewayStatusLeaseKey is the leases-bucket key held by the watcher
// replica that writes the Gateway API status of a target.
func GatewayStatusLeaseKey(target string) string { return "gateway-status." + target }

// LeaseSubject is the subject a leases-bucket key is stored under in the
// bucket's stream: a lease renewed with a TTL of its own is published there.
func LeaseSubject(key string) string { return "$KV." + BucketLeases + "." + key }

// KindHeartbeatPrefix starts the leases-bucket keys of validator kinds'
// heartbeats: kind.<kind>.<replica>.
const KindHeartbeatPrefix = "kind."

// KindHeartbeatKey is the key of one replica's heartbeat for kind. Dots in
// the replica name are kept (they are key separators); KindOfHeartbeatKey
// reads the kind back.
func KindHeartbeatKey(kind, replica string) string { return KindHeartbeatPrefix + kind + "." + replica }

// KindOfHeartbeatKey returns the kind a heartbeat key names.
func KindOfHeartbeatKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, KindHeartbeatPrefix)
	kind, _, found := strings.Cut(rest, ".")
	return kind, ok && found && kind != ""
}
func VerdictKey(bundleHash string, kinds []string) string {
	return bundleHash + "." + strings.Join(kinds, "-")
}

// KeyEscape makes s safe as one token of a KV key: bytes other than ASCII
// letters, digits and '-' become "=XX" (hex). The result never contains '.',
// so names with dots cannot be confused with key separators.
func KeyEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "=%02X", c)
	}
	return b.String()
}

// KeyUnescape reverses KeyEscape.
func KeyUnescape(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: truncated escape in key token %q", ErrInvalid, s)
		}
		var c byte
		if _, err := fmt.Sscanf(s[i+1:i+3], "%02X", &c); err != nil {
			return "", fmt.Errorf("%w: bad escape in key token %q", ErrInvalid, s)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

// ConfigStatusKey holds the ConfigStatus in BucketStatus; ConfigKey the
// active Config in BucketConfig.
const (
	ConfigStatusKey = "config"
	ConfigKey       = "current"
)

// StatusSubject is the subject a write of key in the status bucket goes to.
func StatusSubject(key string) string { return "$KV." + BucketStatus + "." + key }
