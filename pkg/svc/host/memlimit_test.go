package host

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCgroupMemoryLimit reads the memory limit of the process's cgroup as
// the kernel lays it out: cgroup v2 (the lowest memory.max from the
// process's cgroup up to the root, "max" being none), cgroup v1 (the
// memory controller's memory.limit_in_bytes, a huge number being none).
func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name     string
		cgroup   string            // /proc/self/cgroup
		files    map[string]string // under the cgroup root
		want     int64
		wantFile string
		wantOK   bool
	}{
		{name: "v2, a container's limit", cgroup: "0::/\n",
			files: map[string]string{"memory.max": "536870912\n"}, want: 536870912, wantFile: "memory.max", wantOK: true},
		{name: "v2, no limit", cgroup: "0::/\n",
			files: map[string]string{"memory.max": "max\n"}},
		{name: "v2, a systemd unit's MemoryMax under a lower slice limit", cgroup: "0::/system.slice/weft.service\n",
			files: map[string]string{
				"system.slice/weft.service/memory.max": "2147483648\n",
				"system.slice/memory.max":              "1073741824\n",
			}, want: 1073741824, wantFile: "system.slice/memory.max", wantOK: true},
		{name: "v2, the unit's own limit lowest", cgroup: "0::/system.slice/weft.service\n",
			files: map[string]string{
				"system.slice/weft.service/memory.max": "268435456\n",
				"system.slice/memory.max":              "max\n",
			}, want: 268435456, wantFile: "system.slice/weft.service/memory.max", wantOK: true},
		{name: "v1, a container's limit", cgroup: "4:memory:/kubepods/pod1/c1\n3:cpu,cpuacct:/kubepods/pod1/c1\n",
			files: map[string]string{"memory/memory.limit_in_bytes": "805306368\n"}, want: 805306368, wantFile: "memory/memory.limit_in_bytes", wantOK: true},
		{name: "v1, mounted at the hierarchy's root", cgroup: "4:memory:/kubepods/pod1/c1\n",
			files: map[string]string{"memory/kubepods/pod1/c1/memory.limit_in_bytes": "805306368\n"}, want: 805306368, wantFile: "memory/kubepods/pod1/c1/memory.limit_in_bytes", wantOK: true},
		{name: "v1, unlimited", cgroup: "4:memory:/\n",
			files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}},
		{name: "hybrid: v2 without the memory controller, v1 unlimited", cgroup: "4:memory:/process_api/x\n0::/\n",
			files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}},
		{name: "unreadable limit", cgroup: "0::/\n", files: map[string]string{"memory.max": "lots\n"}},
		{name: "no cgroup files", cgroup: "0::/\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			proc := filepath.Join(dir, "proc-self-cgroup")
			if err := os.WriteFile(proc, []byte(tc.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			got, from, ok := cgroupMemoryLimit(proc, root)
			wantFile := ""
			if tc.wantFile != "" {
				wantFile = filepath.Join(root, tc.wantFile)
			}
			if got != tc.want || ok != tc.wantOK || from != wantFile {
				t.Fatalf("limit %d from %q, ok %v; want %d from %q, %v", got, from, ok, tc.want, wantFile, tc.wantOK)
			}
		})
	}
	if _, _, ok := cgroupMemoryLimit(filepath.Join(t.TempDir(), "missing"), t.TempDir()); ok {
		t.Fatal("a limit without /proc/self/cgroup")
	}
}
