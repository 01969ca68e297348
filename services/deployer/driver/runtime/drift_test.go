package runtime

import (
	"strings"
	"testing"
)

// stateHeader is the head of HAProxy 2.6's "show servers state".
const stateHeader = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n"

// stateLine is one server's line: address, port, admin state and weight.
func stateLine(be, srv, addr, port, adm, weight string) string {
	return "4 " + be + " 1 " + srv + " " + addr + " 2 " + adm + " " + weight + " 1 0 1 0 2 0 0 0 0 - " + port + " - 0 0 - - 0\n"
}

// TestServerDrift reads what HAProxy runs against the configuration and
// returns the commands that set it back.
func TestServerDrift(t *testing.T) {
	cfg := "backend be\n  server A 10.0.0.1:80\n  server B 10.0.0.2:80 weight 3\n  server C 127.0.0.1:1 disabled\n  server D web.internal:80\n"
	running := stateLine("be", "A", "10.0.0.1", "80", "0", "1") + stateLine("be", "B", "10.0.0.2", "80", "0", "3") +
		stateLine("be", "C", "127.0.0.1", "1", "5", "1") + stateLine("be", "D", "10.9.9.9", "80", "0", "1")
	cases := []struct {
		name, cfg, state string
		want             []string
		err              string
	}{
		{"as configured", cfg, stateHeader + running, nil, ""},
		{"an address and a weight changed", cfg, stateHeader + strings.NewReplacer(
			stateLine("be", "A", "10.0.0.1", "80", "0", "1"), stateLine("be", "A", "10.0.0.7", "81", "0", "1"),
			stateLine("be", "B", "10.0.0.2", "80", "0", "3"), stateLine("be", "B", "10.0.0.2", "80", "0", "9"),
		).Replace(running), []string{"set server be/A addr 10.0.0.1 port 80", "set server be/B weight 3"}, ""},
		{"a server put in maintenance", cfg, stateHeader + strings.Replace(running,
			stateLine("be", "A", "10.0.0.1", "80", "0", "1"), stateLine("be", "A", "10.0.0.1", "80", "1", "1"), 1),
			[]string{"set server be/A state ready"}, ""},
		{"a drained server", cfg, stateHeader + strings.Replace(running,
			stateLine("be", "B", "10.0.0.2", "80", "0", "3"), stateLine("be", "B", "10.0.0.2", "80", "8", "3"), 1),
			[]string{"set server be/B state ready"}, ""},
		{"a disabled slot made ready", cfg, stateHeader + strings.Replace(running,
			stateLine("be", "C", "127.0.0.1", "1", "5", "1"), stateLine("be", "C", "127.0.0.1", "1", "4", "1"), 1),
			[]string{"set server be/C state maint"}, ""},
		{"a server with an agent check", cfg + "  server F 10.0.0.6:80 agent-check agent-port 9999\n", stateHeader + running + stateLine("be", "F", "10.0.0.6", "80", "0", "50"), nil, ""},
		{"a server unknown to HAProxy", cfg + "  server E 10.0.0.5:80\n", stateHeader + running, nil, ""},
		{"conditional blocks", ".if defined(X)\n.endif\n" + cfg, stateHeader + stateLine("be", "A", "10.0.0.7", "80", "0", "1"), nil, ""},
		{"default-server sets weights", "defaults\n  default-server weight 2\n" + cfg, stateHeader + stateLine("be", "A", "10.0.0.7", "80", "0", "1"), nil, ""},
		{"nothing running", cfg, "", nil, ""},
		{"no header", cfg, stateLine("be", "A", "10.0.0.1", "80", "0", "1"), nil, "no header"},
		{"an unreadable line", cfg, stateHeader + "4 be 1 A 10.0.0.1 2 x\n", nil, "no srv_port"},
		{"an unreadable number", cfg, stateHeader + stateLine("be", "A", "10.0.0.1", "eighty", "0", "1"), nil, "unreadable line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := serverDrift([]byte(tc.cfg), tc.state)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range ops {
				got = append(got, o.cmd)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
