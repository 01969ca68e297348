package confd

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkRender1000Keys renders templates over 1,000 selected keys
// (500 services with a host and a port), among 1,000 more the resource
// does not select:
//   - getv: one getv per key, 1,000 lookups written out in the template;
//   - gets: one range over gets "/svc/*/host" with a getv for each port;
//   - lsdir: confd's usual idiom, range over lsdir with two getv each.
func BenchmarkRender1000Keys(b *testing.B) {
	const services = 500
	values := make(map[string]string, 4*services)
	var getv strings.Builder
	for i := range services {
		name := fmt.Sprintf("s%04d", i)
		values["/bench/svc/"+name+"/host"] = fmt.Sprintf("10.0.%d.%d", i/250, i%250)
		values["/bench/svc/"+name+"/port"] = fmt.Sprint(8000 + i)
		values["/other/svc/"+name+"/host"] = "unselected"
		values["/other/svc/"+name+"/port"] = "unselected"
		fmt.Fprintf(&getv, "server %s {{getv \"/svc/%s/host\"}}:{{getv \"/svc/%s/port\"}}\n", name, name, name)
	}
	templates := map[string]string{
		"getv":  getv.String(),
		"gets":  `{{range gets "/svc/*/host"}}server {{base (dir .Key)}} {{.Value}}:{{getv (printf "%s/port" (dir .Key))}}` + "\n{{end}}",
		"lsdir": `{{range $s := lsdir "/svc"}}server {{$s}} {{getv (printf "/svc/%s/host" $s)}}:{{getv (printf "/svc/%s/port" $s)}}` + "\n{{end}}",
	}
	var want []byte
	for _, name := range []string{"getv", "gets", "lsdir"} {
		dir := writeConfdir(b, map[string]string{
			"conf.d/bench.toml":    "[template]\nsrc = \"bench.tmpl\"\ndest = \"/etc/bench.conf\"\nprefix = \"/bench\"\nkeys = [\"/svc\"]\n",
			"templates/bench.tmpl": templates[name],
		})
		rs, err := LoadConfdir(dir)
		if err != nil {
			b.Fatal(err)
		}
		r := rs[0]
		out, err := r.Render(values)
		if err != nil {
			b.Fatal(err)
		}
		// All three produce the same file: a check that each really reads
		// the 1,000 keys.
		if want == nil {
			want = out
		} else if string(out) != string(want) {
			b.Fatalf("%s renders differently:\n%.200s\n---\n%.200s", name, out, want)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				if _, err := r.Render(values); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
