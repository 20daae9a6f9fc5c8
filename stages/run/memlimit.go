package run

import (
	"bufio"
	"bytes"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// budgetPercent is the budget's share of the process's memory limit. The
// silver benchmark's backlog in a 512 MiB cgroup with GOMEMLIMIT at the
// limit peaked at 226 MB of live heap with a 179 MiB budget, and its
// memory at 461 MiB (at 40 % and 50 % the kernel's limit was hit or the
// process OOM-killed: the heap goal, twice the live heap, reaches
// GOMEMLIMIT, and the writes in progress come on top).
const budgetPercent = 35

// DefaultBudget is the budget when neither GOMEMLIMIT nor a cgroup memory
// limit is set: the silver benchmark's backlog then peaks at about 350 MiB
// of resident memory.
const DefaultBudget = 96 << 20

// DefaultMemoryLimit is the Go soft memory limit (debug.SetMemoryLimit) a
// process running pipelines sets when nothing bounds its memory (see
// UseDefaultMemoryLimit), so that its budget (budgetPercent of it: 112
// MiB) and the garbage collector work to one figure. Without a limit the
// heap goal is twice the live heap: the silver benchmark's backlog then
// peaked at 351–372 MiB with the 96 MiB DefaultBudget, and at 337 MiB with
// this limit, 12 % faster (fewer, larger windows; bench/results-silver.md).
const DefaultMemoryLimit = 320 << 20

// UseDefaultMemoryLimit reports whether a process should set
// DefaultMemoryLimit: no explicit budget, no GOMEMLIMIT in its environment
// (goMemLimitEnv, whatever its value: "off" is the operator's choice too)
// and no cgroup memory limit.
func UseDefaultMemoryLimit(explicitBudget int64, goMemLimitEnv string, l MemoryLimits) bool {
	return explicitBudget <= 0 && goMemLimitEnv == "" && l.Cgroup <= 0 &&
		(l.GoMemLimit <= 0 || l.GoMemLimit == math.MaxInt64)
}

// ProcessBudget is BudgetFor for a process that owns its memory settings:
// when UseDefaultMemoryLimit holds it returns DefaultMemoryLimit as the
// soft limit the caller must set (debug.SetMemoryLimit) and the budget
// derived from it ("default GOMEMLIMIT"); else BudgetFor's result and 0.
func ProcessBudget(explicit int64, goMemLimitEnv string, l MemoryLimits) (budget int64, source string, softLimit int64) {
	if UseDefaultMemoryLimit(explicit, goMemLimitEnv, l) {
		l.GoMemLimit = DefaultMemoryLimit
		budget, _ = BudgetFor(explicit, l)
		return budget, "default GOMEMLIMIT", DefaultMemoryLimit
	}
	budget, source = BudgetFor(explicit, l)
	return budget, source, 0
}

// MemoryLimits are the limits BudgetFor derives a budget from.
type MemoryLimits struct {
	// GoMemLimit is the Go runtime's soft memory limit (GOMEMLIMIT, as
	// debug.SetMemoryLimit(-1) reports it); 0 or math.MaxInt64: none.
	GoMemLimit int64
	// Cgroup is the memory limit of the process's cgroup, the lowest on the
	// way to its hierarchy's root (v2 memory.max, v1
	// memory.limit_in_bytes); 0: none.
	Cgroup int64
}

// CurrentMemoryLimits reads the limits of this process: GOMEMLIMIT and
// the cgroup's (from /proc/self/cgroup, /proc/self/mountinfo and the
// cgroup file system; 0 when it cannot be read).
func CurrentMemoryLimits() MemoryLimits {
	return MemoryLimits{GoMemLimit: debug.SetMemoryLimit(-1), Cgroup: CgroupMemoryLimit(os.DirFS("/"))}
}

// BudgetFor returns the memory budget and where it comes from: explicit
// when > 0 ("flag"); else budgetPercent of the lower of GOMEMLIMIT and the
// cgroup's limit ("GOMEMLIMIT" or "cgroup"), the rest left to what the
// budget does not count (see Budget) and to the garbage collector, whose
// heap goal is twice the live heap; else DefaultBudget ("default"). The
// result is at least MinBudget.
func BudgetFor(explicit int64, l MemoryLimits) (bytes int64, source string) {
	if explicit > 0 {
		return max(explicit, MinBudget), "flag"
	}
	limit, source := int64(0), "default"
	if l.GoMemLimit > 0 && l.GoMemLimit < math.MaxInt64 {
		limit, source = l.GoMemLimit, "GOMEMLIMIT"
	}
	if l.Cgroup > 0 && (limit == 0 || l.Cgroup < limit) {
		limit, source = l.Cgroup, "cgroup"
	}
	if limit == 0 {
		return DefaultBudget, source
	}
	return max(limit/100*budgetPercent, MinBudget), source
}

// CgroupMemoryLimit returns the memory limit of the cgroup of the process
// reading fsys (a file system rooted at "/": os.DirFS("/")), 0 when there
// is none or it cannot be read. With the memory controller of cgroup v1
// mounted (also on hybrid hosts) it reads memory.limit_in_bytes, else
// cgroup v2's memory.max, in the process's cgroup and each parent up to the
// mount point, and returns the lowest.
func CgroupMemoryLimit(fsys fs.FS) int64 {
	groups, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0
	}
	mounts, err := fs.ReadFile(fsys, "proc/self/mountinfo")
	if err != nil {
		return 0
	}
	var v1Path, v2Path string
	hasV1, hasV2 := false, false
	for _, line := range strings.Split(string(groups), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2Path, hasV2 = f[2], true
		case hasWord(f[1], "memory"):
			v1Path, hasV1 = f[2], true
		}
	}
	var v1Mount, v1Root, v2Mount, v2Root string
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional…] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch {
		case qf[0] == "cgroup2" && v2Mount == "":
			v2Root, v2Mount = pf[3], pf[4]
		case qf[0] == "cgroup" && hasWord(qf[2], "memory") && v1Mount == "":
			v1Root, v1Mount = pf[3], pf[4]
		}
	}
	switch {
	case hasV1 && v1Mount != "":
		return lowestLimit(fsys, v1Mount, v1Root, v1Path, "memory.limit_in_bytes")
	case hasV2 && v2Mount != "":
		return lowestLimit(fsys, v2Mount, v2Root, v2Path, "memory.max")
	}
	return 0
}

// hasWord reports whether the comma-separated list has the word w.
func hasWord(list, w string) bool { return strings.Contains(","+list+",", ","+w+",") }

// lowestLimit returns the lowest limit set in file in the cgroup at
// cgPath (as /proc/self/cgroup shows it) and its parents, under a
// hierarchy mounted at mount whose root is root; 0 when none is set.
func lowestLimit(fsys fs.FS, mount, root, cgPath, file string) int64 {
	rel, ok := strings.CutPrefix(path.Clean(cgPath), path.Clean(root))
	if !ok {
		rel = "" // outside the mount's root (a cgroup namespace): the mount shows ours
	}
	dir := strings.TrimPrefix(path.Join(mount, rel), "/")
	top := strings.TrimPrefix(path.Clean(mount), "/")
	lowest := int64(0)
	for {
		if n := readLimit(fsys, path.Join(dir, file)); n > 0 && (lowest == 0 || n < lowest) {
			lowest = n
		}
		if dir == top || dir == "." || dir == "" {
			return lowest
		}
		dir = path.Dir(dir)
	}
}

// readLimit reads a cgroup limit file: bytes, or 0 for none ("max", v1's
// page-rounded MaxInt64, a missing file).
func readLimit(fsys fs.FS, name string) int64 {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0
	}
	return n
}
