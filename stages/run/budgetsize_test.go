package run_test

import (
	"math"
	"testing"
	"testing/fstest"

	"github.com/sluicehq/sluice/stages/run"
)

// The budget comes from the flag when set, else from the lower of
// GOMEMLIMIT and the cgroup's limit (35 % of it), else the default; it is
// never below MinBudget.
func TestBudgetFor(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		flag       int64
		limits     run.MemoryLimits
		want       int64
		wantSource string
	}{
		{"nothing set", 0, run.MemoryLimits{}, run.DefaultBudget, "default"},
		{"GOMEMLIMIT unset (MaxInt64) and no cgroup limit", 0, run.MemoryLimits{GoMemLimit: math.MaxInt64}, run.DefaultBudget, "default"},
		{"GOMEMLIMIT only", 0, run.MemoryLimits{GoMemLimit: 1000 * mib}, 350 * mib, "GOMEMLIMIT"},
		{"cgroup only", 0, run.MemoryLimits{GoMemLimit: math.MaxInt64, Cgroup: 512 * mib}, 512 * mib / 100 * 35, "cgroup"},
		{"GOMEMLIMIT as the cgroup limit (deploy/k8s)", 0, run.MemoryLimits{GoMemLimit: 512 * mib, Cgroup: 512 * mib}, 512 * mib / 100 * 35, "GOMEMLIMIT"},
		{"GOMEMLIMIT below the cgroup", 0, run.MemoryLimits{GoMemLimit: 400 * mib, Cgroup: 1000 * mib}, 140 * mib, "GOMEMLIMIT"},
		{"cgroup below GOMEMLIMIT", 0, run.MemoryLimits{GoMemLimit: 2000 * mib, Cgroup: 1000 * mib}, 350 * mib, "cgroup"},
		{"flag wins over both", 64 * mib, run.MemoryLimits{GoMemLimit: 512 * mib, Cgroup: 512 * mib}, 64 * mib, "flag"},
		{"flag wins over the default", 1 << 30, run.MemoryLimits{}, 1 << 30, "flag"},
		{"flag below the minimum", 1 << 10, run.MemoryLimits{}, run.MinBudget, "flag"},
		{"tiny limit", 0, run.MemoryLimits{Cgroup: 8 * mib}, run.MinBudget, "cgroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, source := run.BudgetFor(tc.flag, tc.limits)
			if got != tc.want || source != tc.wantSource {
				t.Errorf("BudgetFor(%d, %+v) = %d (%s), want %d (%s)", tc.flag, tc.limits, got, source, tc.want, tc.wantSource)
			}
		})
	}
}

// A process sets the default soft memory limit only when nothing else
// bounds it: no budget flag, no GOMEMLIMIT in its environment, no cgroup
// limit.
func TestUseDefaultMemoryLimit(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name   string
		flag   int64
		env    string
		limits run.MemoryLimits
		want   bool
	}{
		{"nothing set", 0, "", run.MemoryLimits{GoMemLimit: math.MaxInt64}, true},
		{"nothing read", 0, "", run.MemoryLimits{}, true},
		{"budget flag", 64 * mib, "", run.MemoryLimits{GoMemLimit: math.MaxInt64}, false},
		{"GOMEMLIMIT=off", 0, "off", run.MemoryLimits{GoMemLimit: math.MaxInt64}, false},
		{"GOMEMLIMIT set", 0, "1GiB", run.MemoryLimits{GoMemLimit: 1 << 30}, false},
		{"limit set in the process", 0, "", run.MemoryLimits{GoMemLimit: 200 * mib}, false},
		{"cgroup limit", 0, "", run.MemoryLimits{GoMemLimit: math.MaxInt64, Cgroup: 512 * mib}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run.UseDefaultMemoryLimit(tc.flag, tc.env, tc.limits); got != tc.want {
				t.Errorf("UseDefaultMemoryLimit(%d, %q, %+v) = %v, want %v", tc.flag, tc.env, tc.limits, got, tc.want)
			}
		})
	}
}

// The cgroup limit is read from the process's cgroup as /proc/self/cgroup
// and /proc/self/mountinfo locate it: cgroup v1's memory controller when
// it is mounted (hybrid hosts included), else v2; the lowest limit of the
// cgroup and its parents; none when unlimited or unreadable.
func TestCgroupMemoryLimit(t *testing.T) {
	t.Parallel()
	const (
		v1Mounts = "25 24 0:22 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
			"30 24 0:27 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory\n" +
			"31 24 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
		v2Mounts = "22 1 0:21 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
		unlimV1  = "9223372036854771712\n"
	)
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"v1: the process's cgroup", map[string]string{
			"proc/self/cgroup":                                 "12:cpu:/\n4:memory:/bench\n0::/\n",
			"proc/self/mountinfo":                              v1Mounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":       unlimV1,
			"sys/fs/cgroup/memory/bench/memory.limit_in_bytes": "536870912\n",
		}, 512 << 20},
		{"v1: a parent's limit is lower", map[string]string{
			"proc/self/cgroup":                                             "4:memory:/kubepods/pod1/ctr\n",
			"proc/self/mountinfo":                                          v1Mounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                   unlimV1,
			"sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes":          "8589934592\n",
			"sys/fs/cgroup/memory/kubepods/pod1/memory.limit_in_bytes":     "268435456\n",
			"sys/fs/cgroup/memory/kubepods/pod1/ctr/memory.limit_in_bytes": unlimV1,
		}, 256 << 20},
		{"v1: unlimited", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"proc/self/mountinfo":                        v1Mounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": unlimV1,
		}, 0},
		{"v1 with controllers mounted together (memory among them)", map[string]string{
			"proc/self/cgroup":    "7:cpuacct,memory:/job\n",
			"proc/self/mountinfo": "30 24 0:27 / /sys/fs/cgroup/cpuacct,memory rw - cgroup cgroup rw,cpuacct,memory\n",
			"sys/fs/cgroup/cpuacct,memory/job/memory.limit_in_bytes": "1073741824\n",
		}, 1 << 30},
		{"v1 in a cgroup namespace: the mount's root is the cgroup", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"proc/self/mountinfo":                        "30 24 0:27 /kubepods/pod1 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n",
		}, 512 << 20},
		{"v2: memory.max", map[string]string{
			"proc/self/cgroup":    "0::/system.slice/sluice.service\n",
			"proc/self/mountinfo": v2Mounts,
			"sys/fs/cgroup/system.slice/sluice.service/memory.max": "402653184\n",
			"sys/fs/cgroup/system.slice/memory.max":                "max\n",
		}, 384 << 20},
		{"v2: max here, a parent limited", map[string]string{
			"proc/self/cgroup":             "0::/a/b\n",
			"proc/self/mountinfo":          v2Mounts,
			"sys/fs/cgroup/a/b/memory.max": "max\n",
			"sys/fs/cgroup/a/memory.max":   "1073741824\n",
		}, 1 << 30},
		{"v2 in a container (namespace root /)", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      "600 599 0:30 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, 512 << 20},
		{"v2: unlimited", map[string]string{
			"proc/self/cgroup":                    "0::/user.slice\n",
			"proc/self/mountinfo":                 v2Mounts,
			"sys/fs/cgroup/user.slice/memory.max": "max\n",
		}, 0},
		{"hybrid: v1 memory wins over the unified hierarchy", map[string]string{
			"proc/self/cgroup":    "4:memory:/bench\n0::/other\n",
			"proc/self/mountinfo": v1Mounts,
			"sys/fs/cgroup/memory/bench/memory.limit_in_bytes": "536870912\n",
			"sys/fs/cgroup/unified/other/memory.max":           "1048576\n",
		}, 512 << 20},
		{"no /proc", map[string]string{}, 0},
		{"no cgroup mount", map[string]string{
			"proc/self/cgroup":    "0::/\n",
			"proc/self/mountinfo": "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n",
		}, 0},
		{"garbage in the limit file", map[string]string{
			"proc/self/cgroup":           "0::/x\n",
			"proc/self/mountinfo":        v2Mounts,
			"sys/fs/cgroup/x/memory.max": "lots\n",
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tc.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			if got := run.CgroupMemoryLimit(fsys); got != tc.want {
				t.Errorf("CgroupMemoryLimit = %d, want %d", got, tc.want)
			}
		})
	}
}
