package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// memCgroup is a fresh memory cgroup that the pipeline process of variant
// m runs in, as a container with a memory limit does: cgroup v1 (a memory
// hierarchy mounted at /sys/fs/cgroup/memory) or v2 (the memory controller
// enabled at /sys/fs/cgroup). Creating one needs root.
type memCgroup struct {
	dir string
	v2  bool
}

// newMemCgroup creates the cgroup name with a memory limit of limit bytes.
func newMemCgroup(name string, limit int64) (*memCgroup, error) {
	var c memCgroup
	switch {
	case fileExists("/sys/fs/cgroup/memory/memory.limit_in_bytes"):
		c.dir = filepath.Join("/sys/fs/cgroup/memory", name)
	case hasController("/sys/fs/cgroup/cgroup.subtree_control", "memory"):
		c.dir, c.v2 = filepath.Join("/sys/fs/cgroup", name), true
	default:
		return nil, errors.New("no memory cgroup: neither a v1 memory hierarchy at /sys/fs/cgroup/memory nor the v2 memory controller at /sys/fs/cgroup")
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create memory cgroup (needs root): %w", err)
	}
	file, val := "memory.limit_in_bytes", strconv.FormatInt(limit, 10)
	if c.v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(val), 0o644); err != nil {
		_ = os.Remove(c.dir)
		return nil, fmt.Errorf("set the memory limit of %s: %w", c.dir, err)
	}
	if c.v2 {
		// No swap, like a Kubernetes container by default.
		_ = os.WriteFile(filepath.Join(c.dir, "memory.swap.max"), []byte("0"), 0o644)
	}
	return &c, nil
}

// wrap returns the command line that starts argv inside the cgroup: a
// shell writes its own pid into cgroup.procs, then execs argv (same pid),
// so the process is charged to the cgroup from its first allocation.
func (c *memCgroup) wrap(argv []string) (string, []string) {
	return "/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.dir, "cgroup.procs")}, argv...)
}

// cgStats are the cgroup's counters after the run.
type cgStats struct {
	peak     int64 // highest memory usage charged, bytes
	failcnt  int64 // times the limit was hit (v1; v2: memory.events max)
	oomKills int64
}

func (c *memCgroup) stats() cgStats {
	var s cgStats
	if c.v2 {
		s.peak = readInt(filepath.Join(c.dir, "memory.peak"))
		ev := keyValues(filepath.Join(c.dir, "memory.events"))
		s.failcnt, s.oomKills = ev["max"], ev["oom_kill"]
		return s
	}
	s.peak = readInt(filepath.Join(c.dir, "memory.max_usage_in_bytes"))
	s.failcnt = readInt(filepath.Join(c.dir, "memory.failcnt"))
	s.oomKills = keyValues(filepath.Join(c.dir, "memory.oom_control"))["oom_kill"]
	return s
}

// usage returns the memory currently charged to the cgroup, bytes.
func (c *memCgroup) usage() int64 {
	if c.v2 {
		return readInt(filepath.Join(c.dir, "memory.current"))
	}
	return readInt(filepath.Join(c.dir, "memory.usage_in_bytes"))
}

// remove deletes the cgroup once its processes have exited.
func (c *memCgroup) remove() error {
	var err error
	for range 50 {
		if err = os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove memory cgroup %s: %w", c.dir, err)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func hasController(path, name string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+name+" ")
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// keyValues reads a file of "key value" lines (memory.events, memory.oom_control).
func keyValues(path string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = n
		}
	}
	return out
}
