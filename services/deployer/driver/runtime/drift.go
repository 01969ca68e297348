package runtime

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Runtime drift: a server changed through the Runtime API behind the
// driver's back (its address, its weight, put in maintenance or drained)
// leaves every file as it was, so comparing files cannot see it. When an
// Apply finds nothing to deliver, the driver compares each server of the
// configuration on disk with "show servers state" and sets back what
// differs with the commands a configuration change would use; a command
// HAProxy refuses makes it reload instead (ReasonRuntimeDrift), which
// restores every server from the configuration. Servers whose address is
// not a literal ip:port or that have an agent check (the agent sets their
// weight and state) are not compared, nor any server when the
// configuration has conditional blocks or a default-server line that sets
// weights or states (their effective values are not on the server line).

// Admin state bits of "show servers state" (HAProxy's SRV_ADMF_*). A
// server "disabled" in the configuration starts with both FMAINT and
// CMAINT; "set server ... state ready" clears FMAINT only, and the server
// runs: FMAINT is what keeps a server in maintenance.
const (
	admForcedMaint = 0x01
	admForcedDrain = 0x08
)

// liveServer is a server as "show servers state" reports it.
type liveServer struct {
	addr         netip.Addr
	port         int
	weight       int
	maint, drain bool
}

// parseServersState reads "show servers state": a version line, a header
// naming the columns ("# be_id be_name ..."), then one line per server,
// keyed "backend/server".
func parseServersState(out string) (map[string]liveServer, error) {
	col := map[string]int{}
	servers := map[string]liveServer{}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "#" {
			for i, name := range f[1:] {
				col[name] = i
			}
			continue
		}
		if len(col) == 0 {
			continue // the version line
		}
		get := func(name string) (string, error) {
			i, ok := col[name]
			if !ok || i >= len(f) {
				return "", fmt.Errorf("show servers state: no %s in %q", name, line)
			}
			return f[i], nil
		}
		var vals [6]string
		for i, name := range []string{"be_name", "srv_name", "srv_addr", "srv_port", "srv_uweight", "srv_admin_state"} {
			v, err := get(name)
			if err != nil {
				return nil, err
			}
			vals[i] = v
		}
		port, perr := strconv.Atoi(vals[3])
		weight, werr := strconv.Atoi(vals[4])
		adm, aerr := strconv.Atoi(vals[5])
		if perr != nil || werr != nil || aerr != nil {
			return nil, fmt.Errorf("show servers state: unreadable line %q", line)
		}
		addr, _ := netip.ParseAddr(vals[2])
		servers[vals[0]+"/"+vals[1]] = liveServer{
			addr: addr, port: port, weight: weight,
			maint: adm&admForcedMaint != 0, drain: adm&admForcedDrain != 0,
		}
	}
	if len(col) == 0 && strings.TrimSpace(out) != "" {
		return nil, fmt.Errorf("show servers state: no header in %q", out)
	}
	return servers, nil
}

// serverDrift returns the commands that set every running server back to
// what the configuration main says.
func serverDrift(main []byte, state string) ([]op, error) {
	c := parseConfig(main)
	if c.conditional || touchesServerDefaults(c) {
		return nil, nil
	}
	live, err := parseServersState(state)
	if err != nil {
		return nil, err
	}
	var ops []op
	for _, s := range c.sections {
		if s.kind != "backend" && s.kind != "listen" {
			continue
		}
		for _, l := range s.lines {
			if l.words[0] != "server" || len(l.words) < 2 {
				continue
			}
			want, err := parseServer(l.words)
			if err != nil || !want.addr.IsValid() || slices.Contains(want.rest, "agent-check") {
				continue // an agent sets the weight and state of its server
			}
			got, ok := live[s.name+"/"+l.words[1]]
			if !ok {
				continue
			}
			was := server{addr: got.addr, port: got.port, weight: got.weight, rawAddr: netip.AddrPortFrom(got.addr, uint16(got.port)).String()}
			if got.maint {
				was.state = "disabled"
			}
			ch := serverChange{backend: s.name, name: l.words[1], old: was, new: want}
			ops = append(ops, ch.ops()...)
			if got.drain && !got.maint && !want.disabled() {
				ops = append(ops, stateOp(s.name+"/"+l.words[1], "ready"))
			}
		}
	}
	return ops, nil
}

// repairServers sets the running servers back to the configuration main
// through the Runtime API. It reports the commands HAProxy accepted and,
// when it refused one, the refusal; err is set when the running servers
// could not be read.
func (d *Driver) repairServers(ctx context.Context, main []byte) (done []string, refused string, err error) {
	state, err := d.admin.do(ctx, "show servers state")
	if err != nil {
		return nil, "", fmt.Errorf("runtime: show servers state: %w", err)
	}
	ops, err := serverDrift(main, state)
	if err != nil || len(ops) == 0 {
		return nil, "", err
	}
	done, err = d.runOps(ctx, ops)
	if err != nil {
		return done, err.Error(), nil
	}
	return done, "", nil
}
