package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/faults"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/topics"
)

// topicSet is the isolated topic set of one benchmark run.
type topicSet struct{ bronze, dlq, flags string }

// silverTopics creates the prefixed silver topics (catalog settings, the
// bronze topic with partitions partitions).
func silverTopics(ctx context.Context, adm *kadm.Client, prefix string, partitions int) (topicSet, error) {
	var specs []topics.Spec
	for _, s := range topics.Catalog() {
		switch s.Name {
		case topics.BronzeRecords, topics.BronzeDLQ, topics.ControlFlags:
			specs = append(specs, s)
		}
	}
	specs, err := topics.Select(specs, topics.WithPrefix(prefix), topics.WithPartitions(topics.BronzeRecords, int32(partitions)))
	if err != nil {
		return topicSet{}, err
	}
	if _, err := topics.Ensure(ctx, adm, specs); err != nil {
		return topicSet{}, fmt.Errorf("create topics: %w", err)
	}
	return topicSet{prefix + topics.BronzeRecords, prefix + topics.BronzeDLQ, prefix + topics.ControlFlags}, nil
}

// produce writes the corpus to topic in order (record i with timestamp
// p.recordTime(i)) and returns how long it took until every record was acked.
func produce(ctx context.Context, kopts []kgo.Opt, topic string, p *prepared) (time.Duration, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for i, rec := range p.recs {
		r := &kgo.Record{Key: []byte(rec.Key), Value: rec.Value, Timestamp: p.recordTime(i)}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				if failed.Add(1) == 1 {
					firstErr.Store(err)
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if n := failed.Load(); n > 0 {
		return d, fmt.Errorf("%d records failed to produce, first: %v", n, firstErr.Load())
	}
	return d, nil
}

// resultA is the outcome of variant a (or m: a in a memory cgroup).
type resultA struct {
	produce   time.Duration
	run       time.Duration // child start → every record done (metric)
	committed time.Duration // child start → group lag 0 on the bronze topic
	peakRSSKB int64
	cpu       time.Duration // user+system CPU of the child
	machine   float64       // machine CPU busy fraction during run
	cpuSplit  string        // CPU time per command during run
	cpuBy     map[string]time.Duration
	dlq       map[string]int
	dlqTotal  int
	logFile   string
	metrics   string // the pipeline's /metrics at the end

	// Variant m only.
	memLimit int64   // bytes: the cgroup's limit and GOMEMLIMIT
	cg       cgStats // the cgroup's counters at the end
	failure  string  // why the process did not finish (OOM kill, timeout), "" when it did
	done     float64 // records done when it stopped
	misses   int     // /metrics scrapes that failed (no answer within 2 s) while it ran
}

// childRun says how the pipeline process of variant a runs.
type childRun struct {
	name  string // "a" or "m": names the log and profile files
	group string
	// memLimit > 0 (variant m) runs the process in a fresh memory cgroup
	// limited to memLimit bytes with GOMEMLIMIT=memLimit, as
	// deploy/k8s/silver.yaml deploys it; a process that is OOM-killed or
	// does not finish within the timeout is a result, not an error.
	memLimit int64
}

// runVariantA starts the pipeline as a separate process and waits until
// every input record is done.
func runVariantA(ctx context.Context, cfg *config, adm *kadm.Client, ts topicSet, dbURL string, p *prepared, cr childRun) (*resultA, error) {
	suffix := ""
	if cr.name != "a" {
		suffix = "-" + cr.name
	}
	res := &resultA{logFile: cfg.workDir + "/pipeline" + suffix + ".log", memLimit: cr.memLimit}
	exe, err := childExe(cfg, "silver-pipeline")
	if err != nil {
		return nil, err
	}
	pf, err := cfg.childFlags(ts, dbURL, cr.group)
	if err != nil {
		return nil, err
	}
	if cfg.profile {
		pf.cpuProfile = cfg.workDir + "/pipeline" + suffix + ".cpu.pprof"
		pf.memProfile = cfg.workDir + "/pipeline" + suffix + ".allocs.pprof"
	}
	logf, err := os.Create(res.logFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	argv := append([]string{exe}, pf.args()...)
	env := os.Environ()
	var cg *memCgroup
	if cr.memLimit > 0 {
		if cg, err = newMemCgroup("silverbench-"+cfg.id, cr.memLimit); err != nil {
			// Said in the report rather than failing the whole run: the
			// other variants do not need root.
			res.failure = "not run: " + err.Error()
			logf2("%s: %s", cr.name, res.failure)
			return res, nil
		}
		defer func() {
			if err := cg.remove(); err != nil {
				logf2("  %s: %v", cr.name, err)
			}
		}()
		var name string
		name, argv = cg.wrap(argv)
		argv = append([]string{name}, argv...)
		env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", cr.memLimit))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = env

	quiesce()
	cpu0, sampler := machineCPU(), startCPUSampler()
	start := time.Now()
	ch, err := faults.Run(cmd)
	if err != nil {
		return nil, fmt.Errorf("start pipeline: %w", err)
	}
	defer ch.Stop(syscall.SIGTERM)
	pid := cmd.Process.Pid
	metricsURL := "http://" + pf.opsAddr + "/metrics"
	n := float64(len(p.recs))
	deadline := time.After(cfg.timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastLog := time.Now()
	// fail ends a variant m run that did not finish: the outcome is reported.
	fail := func(why string) (*resultA, error) {
		res.failure = why
		res.peakRSSKB = procStatusKB(pid, "VmHWM")
		ch.Stop(syscall.SIGTERM)
		res.cg = cg.stats()
		res.cpuBy = sampler.stop()
		res.cpuSplit = cpuSplit(res.cpuBy)
		logf2("  %s: %s after %s (%.0f/%.0f records done; cgroup peak %d MiB, failcnt %d, OOM kills %d)", cr.name, why,
			time.Since(start).Round(time.Second), res.done, n, res.cg.peak>>20, res.cg.failcnt, res.cg.oomKills)
		return res, nil
	}
	for done := false; !done; {
		select {
		case <-ch.Done():
			err := ch.Err()
			if cg != nil {
				return fail(fmt.Sprintf("process exited (%v)", err))
			}
			return nil, fmt.Errorf("pipeline exited early (%v); see %s", err, res.logFile)
		case <-deadline:
			if cg != nil {
				return fail(fmt.Sprintf("not finished within %s", cfg.timeout))
			}
			ch.Stop(syscall.SIGTERM)
			return nil, fmt.Errorf("pipeline did not finish within %s; see %s", cfg.timeout, res.logFile)
		case <-ctx.Done():
			ch.Stop(syscall.SIGTERM)
			return nil, ctx.Err()
		case <-tick.C:
		}
		got, err := faults.ScrapeSum(metricsURL, "sluice_records_done_total", "")
		switch {
		case err == nil:
			res.done = got
		case !errors.Is(err, faults.ErrNotExposed):
			res.misses++
		}
		if err == nil && got >= n {
			res.run = time.Since(start)
			done = true
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			mem := ""
			if cg != nil {
				mem = fmt.Sprintf(", cgroup %d MiB, failcnt %d, /metrics misses %d", cg.usage()>>20, cg.stats().failcnt, res.misses)
			}
			logf2("  %s: %.0f/%.0f records done after %s (rss %d MiB%s)", cr.name, res.done, n, time.Since(start).Round(time.Second), procStatusKB(pid, "VmRSS")/1024, mem)
		}
	}
	res.machine = machineCPU().busySince(cpu0)
	res.cpuBy = sampler.stop()
	res.cpuSplit = cpuSplit(res.cpuBy)
	// Offsets are committed every second after the effects are durable:
	// wait for the group's lag to reach zero (not part of the rate).
	for {
		lag, err := faults.GroupLag(ctx, adm, pf.group, ts.bronze)
		if err == nil && lag == 0 {
			res.committed = time.Since(start)
			break
		}
		if time.Since(start) > res.run+60*time.Second {
			return nil, fmt.Errorf("group lag still %d (err %v) 60 s after every record was done", lag, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The final metrics (batch sizes, phase durations, merged rows) feed
	// the report and stay next to the log.
	if text, err := faults.Scrape(metricsURL); err == nil {
		res.metrics = text
		_ = os.WriteFile(cfg.workDir+"/pipeline"+suffix+".metrics", []byte(text), 0o644)
	}
	res.peakRSSKB = procStatusKB(pid, "VmHWM")
	res.cpu = procCPU(pid)
	ch.Stop(syscall.SIGTERM)
	if cg != nil {
		res.cg = cg.stats()
	}
	if cr.name != "a" {
		return res, nil // the DLQ topic holds a's dead letters too
	}
	if res.dlq, res.dlqTotal, err = dlqStats(ctx, adm, cfg.kopts, ts.dlq); err != nil {
		return nil, err
	}
	return res, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// dlqStats reads the whole DLQ topic (committed records: see
// readCommitted) and counts records by their dlq.reason and dlq.rule
// headers.
func dlqStats(ctx context.Context, adm *kadm.Client, kopts []kgo.Opt, topic string) (map[string]int, int, error) {
	out := map[string]int{}
	total := 0
	err := faults.ReadCommitted(ctx, adm, kopts, topic, func(r *kgo.Record) {
		var reason, rule string
		for _, h := range r.Headers {
			switch h.Key {
			case stages.HeaderReason:
				reason = string(h.Value)
			case stages.HeaderRule:
				rule = string(h.Value)
			}
		}
		out[dlqKey(stages.Reason(reason), rule)]++
		total++
	})
	return out, total, err
}

// procStatusKB returns a "kB" field of /proc/PID/status (e.g. VmHWM), or -1.
func procStatusKB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return -1
}

// procCPU returns the user+system CPU time of a live process.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// fields after the command: state(0) … utime(11) stime(12), in clock ticks (100 Hz)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// cpuSample is the aggregate line of /proc/stat.
type cpuSample struct{ busy, total int64 }

func machineCPU() cpuSample {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var s cpuSample
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	return s
}

// busySince is the fraction of machine CPU busy since earlier (0..1).
func (s cpuSample) busySince(earlier cpuSample) float64 {
	if s.total == earlier.total {
		return 0
	}
	return float64(s.busy-earlier.busy) / float64(s.total-earlier.total)
}

// cpuSampler accounts the CPU time used by every process between start
// and stop, grouped by command name. It samples /proc every 500 ms and
// keeps the last value seen per process, so processes that exit during
// the interval (a client and its PostgreSQL backends) are counted up to
// their last sample.
type cpuSampler struct {
	base, last map[int]procTime
	stopc      chan struct{}
	done       chan struct{}
}

type procTime struct {
	comm string
	cpu  time.Duration
}

func startCPUSampler() *cpuSampler {
	s := &cpuSampler{base: procTimes(), last: map[int]procTime{}, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			for pid, pt := range procTimes() {
				s.last[pid] = pt
			}
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the CPU time per command.
func (s *cpuSampler) stop() map[string]time.Duration {
	close(s.stopc)
	<-s.done
	for pid, pt := range procTimes() {
		s.last[pid] = pt
	}
	out := map[string]time.Duration{}
	for pid, pt := range s.last {
		d := pt.cpu
		if b, ok := s.base[pid]; ok && b.cpu <= d {
			d -= b.cpu // the same process (a reused pid would have less CPU)
		}
		comm := pt.comm
		if strings.HasPrefix(comm, "kworker/") {
			comm, _, _ = strings.Cut(comm, "-") // kworker/u8:3-writeback: the suffix is the current work queue
		}
		out[comm] += d
	}
	return out
}

func procTimes() map[int]procTime {
	out := map[int]procTime{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		out[pid] = procTime{comm: s[i+1 : j], cpu: procCPU(pid)}
	}
	return out
}

// cpuSplit renders CPU time per command, keeping commands that used at
// least 100 ms, as "name 1.2 s" sorted by time.
func cpuSplit(after map[string]time.Duration) string {
	type kv struct {
		k string
		d time.Duration
	}
	var l []kv
	for k, d := range after {
		if d >= 100*time.Millisecond {
			l = append(l, kv{k, d})
		}
	}
	slices.SortFunc(l, func(a, b kv) int { return int(b.d - a.d) })
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%s %.1f s", x.k, x.d.Seconds()))
	}
	return strings.Join(parts, ", ")
}
