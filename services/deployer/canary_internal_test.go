package deployer

import (
	"slices"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
)

// TestJudge compares HAProxy's views of a canary before the deploy, at the
// start and at the end of the hold.
func TestJudge(t *testing.T) {
	up3 := map[string]string{"be_app/s1": "UP", "be_app/s2": "UP", "be_app/s3": "UP 2/3", "be_web/s1": "UP"}
	counters := func(resp, e uint64) map[string]msg.CanaryCounters {
		return map[string]msg.CanaryCounters{"backend/be_app": {Responses: resp, Err5xx: e}}
	}
	one := 1
	ratio := 0.1
	cases := []struct {
		name               string
		conf               config.Canary
		before, start, end *msg.CanaryStats
		want               []string
	}{
		{"healthy", config.Canary{}, &msg.CanaryStats{Servers: up3, Proxies: counters(100, 1)}, &msg.CanaryStats{Proxies: counters(0, 0)},
			&msg.CanaryStats{Servers: up3, Proxies: counters(100, 1)}, nil},
		{"every server of a backend down", config.Canary{}, &msg.CanaryStats{Servers: up3},
			&msg.CanaryStats{}, &msg.CanaryStats{Servers: map[string]string{"be_app/s1": "DOWN", "be_app/s2": "DOWN 1/2", "be_app/s3": "DOWN", "be_web/s1": "UP"}},
			[]string{"backend be_app: 3 of 3 servers down"}},
		{"down within max_servers_down", config.Canary{MaxServersDown: one}, &msg.CanaryStats{Servers: up3},
			&msg.CanaryStats{}, &msg.CanaryStats{Servers: map[string]string{"be_app/s1": "DOWN", "be_app/s2": "UP", "be_app/s3": "UP", "be_web/s1": "UP"}}, nil},
		{"down before too, or in maintenance", config.Canary{}, &msg.CanaryStats{Servers: map[string]string{"be_app/s1": "DOWN", "be_app/s2": "MAINT"}},
			&msg.CanaryStats{}, &msg.CanaryStats{Servers: map[string]string{"be_app/s1": "DOWN", "be_app/s2": "MAINT"}}, nil},
		{"5xx grew during the hold", config.Canary{}, &msg.CanaryStats{Proxies: counters(1000, 10)}, &msg.CanaryStats{Proxies: counters(50, 0)},
			&msg.CanaryStats{Proxies: counters(150, 50)}, []string{"backend be_app: 5xx ratio 0.50 during the hold (50 of 100 responses), 0.01 before"}},
		{"5xx within the allowed increase", config.Canary{Max5xxRatioIncrease: &ratio}, &msg.CanaryStats{Proxies: counters(100, 0)}, &msg.CanaryStats{Proxies: counters(0, 0)},
			&msg.CanaryStats{Proxies: counters(100, 8)}, nil},
		{"as many 5xx as before", config.Canary{}, &msg.CanaryStats{Proxies: counters(100, 50)}, &msg.CanaryStats{Proxies: counters(0, 0)},
			&msg.CanaryStats{Proxies: counters(100, 52)}, nil},
		{"too few responses to judge", config.Canary{}, nil, &msg.CanaryStats{}, &msg.CanaryStats{Proxies: counters(canaryMinResponses-1, canaryMinResponses-1)}, nil},
		{"counters reset by a reload in the hold", config.Canary{}, &msg.CanaryStats{Proxies: counters(100, 0)}, &msg.CanaryStats{Proxies: counters(500, 0)},
			&msg.CanaryStats{Proxies: counters(20, 20)}, []string{"backend be_app: 5xx ratio 1.00 during the hold (20 of 20 responses), 0.00 before"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := judge(&tc.conf, tc.before, tc.start, tc.end); !slices.Equal(got, tc.want) {
				t.Errorf("judge = %q, want %q", got, tc.want)
			}
		})
	}
}
