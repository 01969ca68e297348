package host

import (
	"bufio"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// memoryLimitShare is the part of the cgroup's memory limit the Go runtime
// is told to stay under (debug.SetMemoryLimit): the rest is for what the
// runtime does not count (the binary's mapped code, the kernel's page
// cache charged to the cgroup).
const memoryLimitShare = 0.9

// unlimited is where a cgroup v1 limit means none (the kernel writes
// 0x7FFFFFFFFFFFF000 rounded to the page size).
const unlimited = int64(1) << 60

var memoryLimitOnce sync.Once

// applyMemoryLimit sets the Go runtime's soft memory limit to
// memoryLimitShare of the memory limit of the process's cgroup (its
// container's, its systemd unit's MemoryMax, the lowest on the way to the
// root), once per process, unless GOMEMLIMIT is set (GOMEMLIMIT=off: no
// limit). With the default GOGC the heap may grow to twice what is live
// before a collection; near the limit the collector runs sooner instead,
// so a replica holding many objects slows down before the kernel kills it.
func applyMemoryLimit(log *slog.Logger) {
	memoryLimitOnce.Do(func() {
		if _, set := os.LookupEnv("GOMEMLIMIT"); set {
			return
		}
		limit, from, ok := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
		if !ok {
			return
		}
		soft := int64(float64(limit) * memoryLimitShare)
		debug.SetMemoryLimit(soft)
		log.Info("Go memory limit set from the cgroup's", "limit_bytes", soft, "cgroup_limit_bytes", limit, "cgroup_file", from)
	})
}

// cgroupMemoryLimit reads the memory limit of the cgroup that procCgroup
// (the format of /proc/self/cgroup) names under root (where cgroupfs is
// mounted): cgroup v2's memory.max of the process's cgroup and each of its
// ancestors, the lowest; else cgroup v1's memory.limit_in_bytes of the
// memory controller's. ok is false when no file sets a limit.
func cgroupMemoryLimit(procCgroup, root string) (limit int64, from string, ok bool) {
	f, err := os.Open(procCgroup)
	if err != nil {
		return 0, "", false
	}
	defer func() { _ = f.Close() }()
	var v2, v1 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasController(parts[1], "memory"):
			v1 = parts[2]
		}
	}
	if v2 != "" {
		for dir := filepath.Clean("/" + v2); ; dir = filepath.Dir(dir) {
			file := filepath.Join(root, dir, "memory.max")
			if n, set := readLimit(file); set && (!ok || n < limit) {
				limit, from, ok = n, file, true
			}
			if dir == "/" {
				break
			}
		}
		if ok {
			return limit, from, true
		}
	}
	if v1 != "" {
		// On a host the memory controller is mounted at the root of the
		// hierarchy, the process's cgroup below it; inside a container,
		// at the container's own cgroup.
		for _, file := range []string{
			filepath.Join(root, "memory", filepath.Clean("/"+v1), "memory.limit_in_bytes"),
			filepath.Join(root, "memory", "memory.limit_in_bytes"),
		} {
			if n, set := readLimit(file); set {
				return n, file, true
			}
		}
	}
	return 0, "", false
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a limit file: a number of bytes, or "max" (none); a
// number from unlimited up is none too.
func readLimit(file string) (int64, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n <= 0 || n >= unlimited {
		return 0, false
	}
	return n, true
}
