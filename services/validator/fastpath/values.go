package fastpath

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// smallInt parses a decimal of at most digits digits, without sign or
// leading zeros (but "0").
func smallInt(s string, digits int) (int, bool) {
	if s == "" || len(s) > digits || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// checkServerAddr accepts IPv4:port and [IPv6]:port with port 1-65535.
func checkServerAddr(a string) error {
	var host, port string
	if strings.HasPrefix(a, "[") {
		end := strings.Index(a, "]:")
		if end < 0 {
			return fmt.Errorf("address %q is not [IPv6]:port", a)
		}
		host, port = a[1:end], a[end+2:]
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return fmt.Errorf("address %q is not an IPv6 literal", a)
		}
	} else {
		i := strings.LastIndexByte(a, ':')
		if i < 0 {
			return fmt.Errorf("address %q has no port", a)
		}
		host, port = a[:i], a[i+1:]
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is4() {
			return fmt.Errorf("address %q is not an IPv4 literal", a)
		}
	}
	if p, ok := smallInt(port, 5); !ok || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	return nil
}

// A use is one way the configuration reads a map file: the match type of
// its keys and the output type of its values ("" for an ACL's pattern
// file, whose whole line is the pattern). An unclassified use has an empty
// match.
type use struct{ match, output string }

// matches are the match types Prove knows how to check a key of.
var matches = map[string]bool{"str": true, "beg": true, "sub": true, "dir": true, "dom": true, "end": true, "reg": true, "ip": true, "int": true}

// converterRE is a map converter right before its file argument.
var converterRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.-])(map(?:_[a-z]+)?(?:_[a-z]+)?)\($`)

// mapUses finds, for every absolute file name the configuration refers to,
// how it is used.
func mapUses(cfg []byte) map[string][]use {
	out := map[string][]use{}
	for _, raw := range strings.Split(string(cfg), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' {
			continue
		}
		for i := 0; i < len(line); {
			j := strings.IndexByte(line[i:], '/')
			if j < 0 {
				break
			}
			start := i + j
			end := start
			for end < len(line) && !strings.ContainsRune(" \t,)", rune(line[end])) {
				end++
			}
			name := line[start:end]
			out[name] = append(out[name], classify(line, start))
			i = end + 1
		}
	}
	return out
}

// classify says how line uses the file name that starts at offset start.
func classify(line string, start int) use {
	before := line[:start]
	if m := converterRE.FindStringSubmatch(before); m != nil {
		parts := strings.Split(m[1], "_")
		u := use{match: "str", output: "str"}
		if len(parts) > 1 {
			u.match = parts[1]
		}
		if len(parts) > 2 {
			u.output = parts[2]
		}
		if !matches[u.match] || (u.output != "str" && u.output != "int" && u.output != "ip") {
			return use{}
		}
		return u
	}
	f := strings.Fields(line)
	if strings.HasSuffix(before, " -f ") && strings.Count(line, " -f ") == 1 && !strings.Contains(line, " -M") {
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-m" && matches[f[i+1]] && strings.Count(line, " -m ") == 1 {
				return use{match: f[i+1]}
			}
		}
	}
	return use{}
}

// maxLine bounds the lines Prove judges; a longer one is left to HAProxy.
const maxLine = 1024

// checkMap checks the lines of a map file that are new in cand (a line
// also in base was accepted with the same uses) against every use of the
// file. It returns how many lines it checked.
func checkMap(name string, base, cand []byte, uses []use) (int, error) {
	if len(uses) == 0 {
		return 0, fullf("map %s: not used in the main configuration the way a map is", name)
	}
	for _, u := range uses {
		if u.match == "" {
			return 0, fullf("map %s: a use that is not a map converter or an ACL's -f with -m", name)
		}
	}
	p, bm, cm := middle(base, cand)
	if len(bm) > 0 && len(cm) > 0 && endsLine(bm) != endsLine(cm) {
		return 0, fullf("map %s: its last line's newline changed", name)
	}
	old := map[string]bool{}
	for _, l := range splitLines(bm) {
		old[string(l)] = true
	}
	n := 0
	for i, l := range splitLines(cm) {
		if old[string(l)] {
			continue
		}
		n++
		if err := checkMapLine(string(l), uses); err != nil {
			return 0, fullf("map %s line %d: %v", name, bytes.Count(cand[:p], []byte("\n"))+i+1, err)
		}
	}
	return n, nil
}

// checkMapLine checks one line of a map or pattern file for every use.
func checkMapLine(l string, uses []use) error {
	if len(l) > maxLine || strings.ContainsAny(l, "\r\x00") {
		return errors.New("line too long or with a CR or NUL")
	}
	trimmed := strings.Trim(l, " \t")
	if trimmed == "" || trimmed[0] == '#' {
		return nil
	}
	for _, u := range uses {
		key, value := trimmed, ""
		if u.output != "" {
			k, v, ok := strings.Cut(strings.ReplaceAll(trimmed, "\t", " "), " ")
			if !ok {
				return errors.New("a key without a value")
			}
			key, value = k, strings.Trim(v, " \t")
			if value == "" {
				return errors.New("a key without a value")
			}
		}
		if err := checkKey(key, u.match); err != nil {
			return err
		}
		if err := checkValue(value, u.output); err != nil {
			return err
		}
	}
	return nil
}

func checkKey(k, match string) error {
	switch match {
	case "ip":
		if ip, err := netip.ParseAddr(k); err == nil && ip.Zone() == "" {
			return nil
		}
		if p, err := netip.ParsePrefix(k); err == nil && p.Addr().Zone() == "" {
			return nil
		}
		return fmt.Errorf("key %q is not an IP address or CIDR", k)
	case "int":
		if !isInt(k) {
			return fmt.Errorf("key %q is not an integer", k)
		}
	case "reg":
		return checkRegex(k)
	}
	return nil
}

func checkValue(v, output string) error {
	switch output {
	case "int":
		if !isInt(v) {
			return fmt.Errorf("value %q is not an integer", v)
		}
	case "ip":
		if ip, err := netip.ParseAddr(v); err != nil || !ip.Is4() {
			return fmt.Errorf("value %q is not an IPv4 address", v)
		}
	}
	return nil
}

// isInt accepts a decimal integer of at most 18 digits, optionally negative.
func isInt(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || len(s) > 18 {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// regexPlain is the subset of regular expressions whose meaning and
// validity PCRE2 and Go's RE2 agree on: printable ASCII without group
// modifiers, lookarounds, back references or escapes but of punctuation
// and the classes \d \w \s and their negations.
var regexPlain = regexp.MustCompile(`^(?:[A-Za-z0-9 .^$*+?()\[\]{}|/:=,@%~!&<>;_-]|\\[.\\/*+?()\[\]{}|^$dDwWsS-])*$`)

// checkRegex accepts a regular expression of the plain subset that Go
// compiles; the rest is left to HAProxy.
func checkRegex(k string) error {
	if !regexPlain.MatchString(k) || strings.Contains(k, "(?") {
		return fmt.Errorf("regex %q is beyond the plainly portable subset", k)
	}
	if _, err := regexp.Compile(k); err != nil {
		return fmt.Errorf("regex %q: %v", k, err)
	}
	return nil
}

// checkCert accepts PEM holding certificates with SHA-2 signatures and
// exactly one private key (RSA of 2048-8192 bits, or ECDSA P-256 or P-384)
// that matches the first certificate, nothing else outside its blocks.
func checkCert(data []byte) error {
	rest := data
	keys, certs := 0, 0
	for {
		rest = []byte(strings.TrimLeft(string(rest), " \t\r\n"))
		if len(rest) == 0 {
			break
		}
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return errors.New("text that is not a PEM block")
		}
		if len(blk.Headers) > 0 {
			return errors.New("an encrypted or annotated PEM block")
		}
		switch blk.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return fmt.Errorf("certificate: %w", err)
			}
			switch c.SignatureAlgorithm {
			case x509.SHA256WithRSA, x509.SHA384WithRSA, x509.SHA512WithRSA, x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512:
			default:
				return fmt.Errorf("certificate signed with %s", c.SignatureAlgorithm)
			}
			certs++
		case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY":
			keys++
		default:
			return fmt.Errorf("a PEM block of type %q", blk.Type)
		}
	}
	if certs == 0 || keys != 1 {
		return fmt.Errorf("%d certificates and %d private keys (want at least one and exactly one)", certs, keys)
	}
	pair, err := tls.X509KeyPair(data, data)
	if err != nil {
		return err
	}
	switch k := pair.PrivateKey.(type) {
	case *rsa.PrivateKey:
		if b := k.N.BitLen(); b < 2048 || b > 8192 {
			return fmt.Errorf("RSA key of %d bits", b)
		}
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ECDSA key on %s", k.Curve.Params().Name)
		}
	default:
		return fmt.Errorf("private key of type %T", k)
	}
	return nil
}
