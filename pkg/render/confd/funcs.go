package confd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// Resolver answers the DNS functions lookupIP, lookupIPV4, lookupIPV6 and
// lookupSRV. *net.Resolver (net.DefaultResolver, the default) is one.
type Resolver interface {
	LookupIP(ctx context.Context, network, host string) ([]net.IP, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// staticFuncs are the functions that do not depend on the store or on the
// render's context. The utility layer comes first and confd's own
// functions are laid over it, as confd builds its map.
func staticFuncs(set *settings) template.FuncMap {
	m := utilityFuncs()
	m["base"] = path.Base
	m["split"] = strings.Split
	m["json"] = unmarshalJSONObject
	m["jsonArray"] = unmarshalJSONArray
	m["dir"] = path.Dir
	m["map"] = createMap
	m["getenv"] = set.getenvFunc()
	m["join"] = strings.Join
	m["datetime"] = set.now
	m["toUpper"] = strings.ToUpper
	m["toLower"] = strings.ToLower
	m["contains"] = strings.Contains
	m["replace"] = strings.Replace
	m["trimSuffix"] = strings.TrimSuffix
	m["lookupIfaceIPV4"] = lookupIfaceIPV4
	m["lookupIfaceIPV6"] = lookupIfaceIPV6
	m["fileExists"] = fileExists
	m["base64Encode"] = base64Encode
	m["base64Decode"] = base64Decode
	m["parseBool"] = strconv.ParseBool
	m["reverse"] = reverse
	m["sortByLength"] = sortByLength
	m["sortKVByLength"] = sortKVByLength
	m["add"] = func(a, b int) int { return a + b }
	m["sub"] = func(a, b int) int { return a - b }
	m["div"] = div
	m["mod"] = mod
	m["mul"] = func(a, b int) int { return a * b }
	m["seq"] = seq
	m["atoi"] = strconv.Atoi
	m["hostname"] = set.hostname
	return m
}

// boundFuncs are the functions of one render: the store lookups, the DNS
// lookups (which follow ctx) and include. They are laid over staticFuncs.
func boundFuncs(ctx context.Context, store *Store, res Resolver, inc *includer) template.FuncMap {
	return template.FuncMap{
		"exists":     store.Exists,
		"ls":         store.List,
		"lsdir":      store.ListDir,
		"get":        store.Get,
		"gets":       store.GetAll,
		"getv":       store.GetValue,
		"getvs":      store.GetAllValues,
		"lookupIP":   func(host string) []string { return lookupIP(ctx, res, host) },
		"lookupIPV4": func(host string) []string { return lookupIPFamily(ctx, res, host, ".") },
		"lookupIPV6": func(host string) []string { return lookupIPFamily(ctx, res, host, ":") },
		"lookupSRV": func(service, proto, name string) []*net.SRV {
			return lookupSRV(ctx, res, service, proto, name)
		},
		"include": inc.include,
	}
}

// seq returns the integers from first to last, both included, like GNU
// seq: seq 3 5 is [3 4 5] and seq 5 5 is [5]. When first > last it counts
// down (seq 5 3 is [5 4 3]), as the maintained confd does; confd 0.16
// returned an empty list there.
func seq(first, last int) []int {
	if first <= last {
		out := make([]int, 0, last-first+1)
		for i := first; i <= last; i++ {
			out = append(out, i)
		}
		return out
	}
	out := make([]int, 0, first-last+1)
	for i := first; i >= last; i-- {
		out = append(out, i)
	}
	return out
}

func div(a, b int) (int, error) {
	if b == 0 {
		return 0, errors.New("division by zero")
	}
	return a / b, nil
}

func mod(a, b int) (int, error) {
	if b == 0 {
		return 0, errors.New("modulo by zero")
	}
	return a % b, nil
}

type byLength []string

func (s byLength) Len() int           { return len(s) }
func (s byLength) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s byLength) Less(i, j int) bool { return len(s[i]) < len(s[j]) }

// sortByLength sorts values by length in bytes, shortest first, in place
// (a variable holding the list sees the new order too) and returns it.
// Like confd it uses sort.Sort, which is not stable: strings of equal
// length keep their relative order for lists of up to 12 items (insertion
// sort) and may not beyond; the order is still deterministic for a given
// input, and the same as confd built with the same sort package.
func sortByLength(values []string) []string {
	sort.Sort(byLength(values))
	return values
}

type byLengthKV []KVPair

func (s byLengthKV) Len() int           { return len(s) }
func (s byLengthKV) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s byLengthKV) Less(i, j int) bool { return len(s[i].Key) < len(s[j].Key) }

// sortKVByLength sorts pairs by the length of their key, shortest first,
// in place, with sortByLength's stability caveat. It takes what gets
// returns.
func sortKVByLength(values []KVPair) []KVPair {
	sort.Sort(byLengthKV(values))
	return values
}

// reverse returns a reversed copy of a []string (ls, lsdir, getvs, split)
// or of a []KVPair (what sortKVByLength returns); the argument is left as
// it was, as the maintained confd does (confd 0.16 reversed in place). Any
// other value is returned as is, and that includes the result of gets
// itself: gets returns the named type KVPairs, which confd's type switch
// on []KVPair does not catch, so in confd `reverse (gets "/x/*")` keeps
// the ascending key order. weft keeps that, so the same template gives
// the same file; reverse (sortKVByLength (gets ...)) does reverse.
func reverse(values any) any {
	switch v := values.(type) {
	case []string:
		out := make([]string, len(v))
		for i := range v {
			out[len(v)-1-i] = v[i]
		}
		return out
	case []KVPair:
		out := make([]KVPair, len(v))
		for i := range v {
			out[len(v)-1-i] = v[i]
		}
		return out
	}
	return values
}

// createMap builds a map from alternating string keys and values (template
// functions map and dict): map "a" 1 "b" 2.
func createMap(values ...any) (map[string]any, error) {
	if len(values)%2 != 0 {
		return nil, errors.New("invalid map call")
	}
	out := make(map[string]any, len(values)/2)
	for i := 0; i < len(values); i += 2 {
		key, ok := values[i].(string)
		if !ok {
			return nil, errors.New("map keys must be strings")
		}
		out[key] = values[i+1]
	}
	return out, nil
}

// unmarshalJSONObject decodes a JSON object (template function json).
// Numbers become float64 (printed as 8080, or 1e+06 from a million), and
// "null" gives an empty (nil) map without error.
func unmarshalJSONObject(data string) (map[string]any, error) {
	var out map[string]any
	err := json.Unmarshal([]byte(data), &out)
	return out, err
}

// unmarshalJSONArray decodes a JSON array (template function jsonArray):
// items keep their JSON types (string, float64, bool, nil, map[string]any,
// []any), in document order. Anything but an array or null is an error.
func unmarshalJSONArray(data string) ([]any, error) {
	var out []any
	err := json.Unmarshal([]byte(data), &out)
	return out, err
}

// lookupIP returns the addresses of host as strings, sorted as strings
// (so "10.0.0.10" comes before "10.0.0.9"), or nil when the lookup fails.
func lookupIP(ctx context.Context, res Resolver, host string) []string {
	ips, err := res.LookupIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	sort.Strings(out)
	return out
}

// lookupIPFamily keeps the addresses of lookupIP that contain sep: "." for
// IPv4, ":" for IPv6 (confd tells them apart by their text). Nothing found
// is nil.
func lookupIPFamily(ctx context.Context, res Resolver, host, sep string) []string {
	var out []string
	for _, ip := range lookupIP(ctx, res, host) {
		if strings.Contains(ip, sep) {
			out = append(out, ip)
		}
	}
	return out
}

type sortSRV []*net.SRV

func (s sortSRV) Len() int      { return len(s) }
func (s sortSRV) Swap(i, j int) { s[i], s[j] = s[j], s[i] }
func (s sortSRV) Less(i, j int) bool {
	return srvSortKey(s[i]) < srvSortKey(s[j])
}

// srvSortKey is confd's ordering of SRV records: target, port, priority
// and weight written one after the other with no separator, compared as a
// string.
func srvSortKey(s *net.SRV) string {
	return fmt.Sprintf("%s%d%d%d", s.Target, s.Port, s.Priority, s.Weight)
}

// lookupSRV returns the SRV records of _service._proto.name in confd's
// order (srvSortKey), or an empty list when the lookup fails.
func lookupSRV(ctx context.Context, res Resolver, service, proto, name string) []*net.SRV {
	_, addrs, err := res.LookupSRV(ctx, service, proto, name)
	if err != nil {
		return []*net.SRV{}
	}
	sort.Sort(sortSRV(addrs))
	return addrs
}

// lookupIfaceIPV4 returns the first IPv4 address of the network interface
// named name, or "" when there is none or no such interface.
func lookupIfaceIPV4(name string) string {
	for _, ip := range ifaceIPs(name) {
		if v4 := ip.To4(); v4 != nil {
			return v4.String()
		}
	}
	return ""
}

// lookupIfaceIPV6 returns the first IPv6 address (IPv4-mapped ones
// excluded) of the network interface named name, or "".
func lookupIfaceIPV6(name string) string {
	for _, ip := range ifaceIPs(name) {
		if ip.To4() == nil && ip != nil {
			return ip.String()
		}
	}
	return ""
}

func ifaceIPs(name string) []net.IP {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return nil
	}
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out
}

// fileExists reports whether p exists on the machine that renders. As in
// confd, only "does not exist" is false: a path that cannot be checked
// (permission denied) counts as existing.
func fileExists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}

func base64Encode(data string) string {
	return base64.StdEncoding.EncodeToString([]byte(data))
}

// base64Decode decodes standard, padded base64. On malformed input confd
// returns the bytes decoded so far together with the error; the error
// stops the template, so only the error matters.
func base64Decode(data string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(data)
	return string(b), err
}
