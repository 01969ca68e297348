package fastpath_test

import (
	"fmt"
	"testing"

	"github.com/weftio/weft/services/validator/fastpath"
)

// mapFiles are the base bundle's map and pattern files, one per use: host
// (map), path prefix (map_beg), regex (map_reg), IP key with integer
// output (map_ip_int), integer key (map_int), IP output (map_str_ip), and
// an ACL's `-m ip -f`.
var mapFiles = []string{"maps/hosts.map", "maps/prefix.map", "maps/regex.map", "maps/rates.map", "maps/tiers.map", "maps/via.map", "maps/lan.acl"}

// servers are the server lines of the base bundle the fuzzer rewrites,
// with the options each keeps.
var servers = []struct{ old, name, rest string }{
	{"server SRV_1 10.0.0.1:8080 weight 100", "SRV_1", ""},
	{"server SRV_2 127.0.0.1:1 disabled", "SRV_2", ""},
	{"server SRV_3 [fd00::1]:8080 check", "SRV_3", " check"},
	{"server s1 10.0.0.9:80", "s1", ""},
}

var certs = []string{"", "ec.pem", "other.pem", "mismatched.pem", "rsa1024.pem", "garbage"}

// FuzzFastVerdict applies runtime-only changes (a server's address, port,
// weight and state; a line added to a map file; a certificate replaced) to
// the base bundle and checks that the fast path never proves valid a
// bundle haproxy -c refuses.
func FuzzFastVerdict(f *testing.F) {
	hc := haproxyKind(f)
	base := loadBase(f)
	certData := map[string]string{"garbage": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}
	for _, c := range certs[1 : len(certs)-1] {
		certData[c] = fixture(f, c)
	}
	// what: 0 a server line, 1 a map line, 2 a certificate, 3 all three.
	for _, s := range []struct {
		what, server uint8
		addr         string
		port, weight int
		state        uint8
		mapFile      uint8
		line         string
		cert         uint8
	}{
		{0, 0, "10.1.2.3", 8080, 100, 0, 0, "", 0},
		{0, 1, "10.1.2.3", 0, -1, 1, 0, "", 0},
		{0, 2, "2001:db8::1", 70000, 300, 2, 0, "", 0},
		{0, 3, "256.1.1.1", 65535, 256, 0, 0, "", 0},
		{0, 0, "::ffff:10.0.0.1", 1, 0, 1, 0, "", 0},
		{0, 1, "0.0.0.0", 443, 1, 2, 0, "", 0},
		{0, 2, "fe80::1%eth0", 80, 50, 0, 0, "", 0},
		{0, 3, "10.0.0.1", 80, 257, 1, 0, "", 0},
		{0, 0, "1.2.3.4", 99999, 10, 0, 0, "", 0},
		{0, 1, "8.8.8.8", 53, -2, 2, 0, "", 0},
		{1, 0, "", 0, 0, 0, 0, "new.example be_app", 0},
		{1, 0, "", 0, 0, 0, 3, "10.0.0.0/33 5", 0},
		{1, 0, "", 0, 0, 0, 3, "10.1.0.0/16 x", 0},
		{1, 0, "", 0, 0, 0, 3, "2001:db8::/48 12", 0},
		{1, 0, "", 0, 0, 0, 2, "^(a|b $", 0},
		{1, 0, "", 0, 0, 0, 2, "^/x{2,1}$ be", 0},
		{1, 0, "", 0, 0, 0, 2, `^/[a-z]{1,3}\.(png|jpg)$ be_app`, 0},
		{1, 0, "", 0, 0, 0, 4, "-12 neg", 0},
		{1, 0, "", 0, 0, 0, 4, "99999999999999999999 big", 0},
		{1, 0, "", 0, 0, 0, 5, "h 10.0.0.300", 0},
		{1, 0, "", 0, 0, 0, 5, "h 192.0.2.55", 0},
		{1, 0, "", 0, 0, 0, 6, "fd00::/8", 0},
		{1, 0, "", 0, 0, 0, 6, "not-an-ip", 0},
		{1, 0, "", 0, 0, 0, 1, "/p be_app", 0},
		{2, 0, "", 0, 0, 0, 0, "", 1},
		{2, 0, "", 0, 0, 0, 0, "", 2},
		{2, 0, "", 0, 0, 0, 0, "", 3},
		{2, 0, "", 0, 0, 0, 0, "", 4},
		{2, 0, "", 0, 0, 0, 0, "", 5},
		{3, 2, "10.9.8.7", 8443, 7, 2, 0, "z.example be_default", 1},
	} {
		f.Add(s.what, s.server, s.addr, s.port, s.weight, s.state, s.mapFile, s.line, s.cert)
	}
	f.Fuzz(func(t *testing.T, what, server uint8, addr string, port, weight int, state, mapFile uint8, line string, cert uint8) {
		var edits []edit
		what %= 4
		sv := servers[int(server)%len(servers)]
		host := addr
		if len(addr) > 0 && addr[0] != '[' && containsColon(addr) {
			host = "[" + addr + "]"
		}
		nl := fmt.Sprintf("server %s %s:%d%s", sv.name, host, port, sv.rest)
		if weight >= -1 {
			nl += fmt.Sprintf(" weight %d", weight)
		}
		switch state % 3 {
		case 1:
			nl += " disabled"
		case 2:
			nl += " enabled"
		}
		if what == 0 || what == 3 {
			edits = append(edits, edit{cfg, sv.old, nl})
		}
		mf := mapFiles[int(mapFile)%len(mapFiles)]
		for _, bf := range base.Files {
			if bf.Path == mf && (what == 1 || what == 3) {
				edits = append(edits, edit{mf, "", string(bf.Content) + line + "\n"})
			}
		}
		if c := certs[int(cert)%len(certs)]; c != "" && (what == 2 || what == 3) {
			edits = append(edits, edit{"certs/site.pem", "", certData[c]})
		}
		cand := apply(t, base, edits...)
		if _, err := fastpath.Prove(base, cand); err != nil {
			return // left to the whole check
		}
		if ok, problems := fullCheck(t, hc, cand); !ok {
			t.Fatalf("the fast path proved valid a bundle haproxy -c refuses: %v\nserver line: %q\n%s line: %q\ncert: %s", problems, nl, mf, line, certs[int(cert)%len(certs)])
		}
	})
}

func containsColon(s string) bool {
	for i := range len(s) {
		if s[i] == ':' {
			return true
		}
	}
	return false
}
