package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/bench/internal/sysload"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/topics"
)

// The peers a user would pick instead of sluice, run on the same bronze
// topic as a (variants k and w, opt-in). Each is its own process, started
// from a symbolic link named after it so that its CPU time is told apart
// from Kafka's (also a java process) and the harness's:
//
//	k. Kafka Streams 4.4 (bench/silverpeers/kstreams, Java 17, built with
//	   Maven): validate → split → DLQ topic / rows buffered per key in a
//	   state store written with JDBC batches (reWriteBatchedInserts) when
//	   Kafka Streams flushes it, i.e. before it commits the offsets; 2
//	   stream threads, commit interval 1 s, -Xmx1g;
//	w. Watermill v1.5.1 + watermill-kafka v3 (bench/silverpeers/watermill,
//	   its own Go module): a router, one handler call per message, one
//	   single-row upsert per valid message, the poison queue middleware
//	   for dead letters; sarama's auto commit every second.
//
// A peer's clock runs from its process start to its consumer group's lag
// on the bronze topic reaching 0: every record's effects are durable and
// its offset committed (both commit every second, so this includes up to
// one commit interval more than a's clock).
const (
	peerKStreams  = "k"
	peerWatermill = "w"
)

// resultPeer is the outcome of a peer variant.
type resultPeer struct {
	name      string
	what      string
	run       time.Duration // process start → group lag 0
	peakRSSKB int64
	cpu       time.Duration
	machine   float64
	cpuSplit  string
	cpuBy     map[string]time.Duration
	dlq       map[string]int
	dlqTotal  int
	logFile   string
	failure   string        // why it was not measured ("" when it was)
	differs   []string      // the checks its output failed (verifyPeers)
	ready     time.Duration // k: process start → the first RUNNING state (JVM start, group join, assignment); 0 when unknown
	load      [2]string     // load average at the start and at the end
}

// peerCmd is how one peer is built and started.
type peerCmd struct {
	what  string
	build func() error
	argv  []string // argv[0] is the executable to link as comm
	env   []string
	group string
	state string // a directory to remove afterwards ("" for none)
}

// runPeer builds and runs peer name (k or w) on ts.bronze with its own DLQ
// topic, consumer group and the schema at dbURL, and waits until its group
// has committed every record. A peer that cannot be built or started, or
// does not finish within cfg.peerTimeout, is reported, not an error.
func runPeer(ctx context.Context, cfg *config, adm *kadm.Client, ts topicSet, name, dbURL string) (*resultPeer, error) {
	res := &resultPeer{name: name, logFile: filepath.Join(cfg.workDir, "peer-"+name+".log")}
	dlqTopic, err := peerDLQ(ctx, cfg, adm, name)
	if err != nil {
		return nil, err
	}
	pc, err := peerCommand(cfg, ts, name, dlqTopic, dbURL)
	if err != nil {
		res.failure = "not run: " + err.Error()
		return res, nil
	}
	res.what = pc.what
	defer func() {
		if cfg.keep {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteGroups(cctx, pc.group)
		_, _ = adm.DeleteTopics(cctx, dlqTopic)
		if pc.state != "" {
			_ = os.RemoveAll(pc.state)
		}
	}()
	logf2("%s: building %s", name, pc.what)
	if err := pc.build(); err != nil {
		res.failure = "not run: build: " + err.Error()
		logf2("%s: %s", name, res.failure)
		return res, nil
	}
	exe, err := linkAs(cfg, pc.argv[0], "silver-peer-"+name)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(res.logFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, pc.argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), pc.env...)

	quiesce()
	res.load[0] = sysload.Averages()
	cpu0, sampler := machineCPU(), startCPUSampler()
	start := time.Now()
	ch, err := faults.Run(cmd)
	if err != nil {
		return nil, fmt.Errorf("start peer %s: %w", name, err)
	}
	defer ch.Stop(syscall.SIGTERM)
	pid := cmd.Process.Pid
	deadline := time.After(cfg.peerTimeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ch.Done():
			err := ch.Err()
			sampler.stop()
			res.failure = fmt.Sprintf("exited early (%v); see %s", err, res.logFile)
			logf2("%s: %s", name, res.failure)
			return res, nil
		case <-deadline:
			sampler.stop()
			res.failure = fmt.Sprintf("not finished within %s", cfg.peerTimeout)
			logf2("%s: %s", name, res.failure)
			return res, nil
		case <-ctx.Done():
			sampler.stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
		lag, err := faults.GroupLag(ctx, adm, pc.group, ts.bronze)
		if err == nil && lag == 0 {
			res.run = time.Since(start)
			break
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			logf2("  %s: lag %d after %s (rss %d MiB)", name, lag, time.Since(start).Round(time.Second), procStatusKB(pid, "VmRSS")/1024)
		}
	}
	res.load[1] = sysload.Averages()
	res.machine = machineCPU().busySince(cpu0)
	res.cpuBy = sampler.stop()
	res.ready = firstRunning(res.logFile, start)
	res.cpuSplit = cpuSplit(res.cpuBy)
	res.peakRSSKB = procStatusKB(pid, "VmHWM")
	res.cpu = procCPU(pid)
	ch.Stop(syscall.SIGTERM)
	if res.dlq, res.dlqTotal, err = dlqStats(ctx, adm, cfg.kopts, dlqTopic); err != nil {
		return nil, err
	}
	return res, nil
}

// peerDLQ creates the DLQ topic of peer name (the catalog's bronze.dlq
// under the run's prefix and the peer's name).
func peerDLQ(ctx context.Context, cfg *config, adm *kadm.Client, name string) (string, error) {
	var specs []topics.Spec
	for _, s := range topics.Catalog() {
		if s.Name == topics.BronzeDLQ {
			specs = append(specs, s)
		}
	}
	prefix := cfg.prefix + name + "."
	specs, err := topics.Select(specs, topics.WithPrefix(prefix))
	if err != nil {
		return "", err
	}
	if _, err := topics.Ensure(ctx, adm, specs); err != nil {
		return "", fmt.Errorf("create the DLQ topic of %s: %w", name, err)
	}
	return prefix + topics.BronzeDLQ, nil
}

// peerCommand says how to build and start peer name.
func peerCommand(cfg *config, ts topicSet, name, dlqTopic, dbURL string) (peerCmd, error) {
	brokers := strings.Join(cfg.brokers, ",")
	group := cfg.prefix + "peer-" + name
	switch name {
	case peerKStreams:
		dir := filepath.Join(cfg.peersDir, "kstreams")
		java, err := exec.LookPath("java")
		if err != nil {
			return peerCmd{}, fmt.Errorf("java: %w", err)
		}
		jdbc, err := jdbcURL(dbURL)
		if err != nil {
			return peerCmd{}, err
		}
		state := filepath.Join(cfg.workDir, "peer-k-state")
		return peerCmd{
			what: "Kafka Streams 4.4.0 (Java 17, 2 stream threads, -Xmx1g)",
			build: func() error {
				args := []string{"-B", "-q", "package"}
				if home, err := os.UserHomeDir(); err == nil {
					if _, err := os.Stat(filepath.Join(home, ".m2/repository/org/postgresql/postgresql/42.7.14")); err == nil {
						args = append([]string{"-o"}, args...)
					}
				}
				return runIn(dir, "mvn", args...)
			},
			argv: []string{java, "-Xmx1g", "-cp", filepath.Join(dir, "target/silver-peer-1.0.jar") + ":" + filepath.Join(dir, "target/lib/*"),
				"sluice.bench.silver.SilverPeer", ts.bronze, dlqTopic, group, state},
			env:   []string{"KAFKA_BROKERS=" + brokers, "SILVER_JDBC_URL=" + jdbc},
			group: group,
			state: state,
		}, nil
	case peerWatermill:
		dir := filepath.Join(cfg.peersDir, "watermill")
		bin := filepath.Join(cfg.workDir, "watermill-peer")
		return peerCmd{
			what:  "Watermill v1.5.1 + watermill-kafka v3.0.6 (one handler call and one upsert per message)",
			build: func() error { return runIn(dir, "go", "build", "-o", bin, ".") },
			argv: []string{bin, "--brokers", brokers, "--group", group, "--topic", ts.bronze, "--dlq-topic", dlqTopic,
				"--ta-upsert", singleRowUpsert(silver.TATable()), "--sa-upsert", singleRowUpsert(silver.SATable())},
			env:   []string{"DATABASE_URL=" + dbURL},
			group: group,
		}, nil
	}
	return peerCmd{}, fmt.Errorf("unknown peer %q", name)
}

// runIn runs a build command in dir; its output goes to the harness's
// stderr.
func runIn(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s in %s: %w", name, strings.Join(args, " "), dir, err)
	}
	return nil
}

// linkAs returns a symbolic link to exe named name in the work directory
// (see childExe): the process started through it has name as its command.
func linkAs(cfg *config, exe, name string) (string, error) {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	link := filepath.Join(cfg.workDir, name)
	_ = os.Remove(link)
	if err := os.Symlink(exe, link); err != nil {
		return "", err
	}
	return link, nil
}

// jdbcURL turns a postgres:// URL (with search_path, see benchdb.SchemaURL) into
// the JDBC URL of the Kafka Streams peer: the same host, database,
// credentials and sslmode, the schema as currentSchema, and
// reWriteBatchedInserts.
func jdbcURL(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("variant k needs DATABASE_URL as a postgres:// URL")
	}
	q := url.Values{}
	if u.User != nil {
		q.Set("user", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	in := u.Query()
	if s := in.Get("sslmode"); s != "" {
		q.Set("sslmode", s)
	}
	if s := in.Get("search_path"); s != "" {
		q.Set("currentSchema", s)
	}
	q.Set("reWriteBatchedInserts", "true")
	host := u.Host
	if host == "" {
		host = "localhost"
	}
	return "jdbc:postgresql://" + host + u.Path + "?" + q.Encode(), nil
}

// firstRunning returns how long after start the Kafka Streams peer logged
// its first {"state":"RUNNING","at_ms":…} line in logFile, 0 when it did
// not (or for the Watermill peer, which logs none).
func firstRunning(logFile string, start time.Time) time.Duration {
	b, err := os.ReadFile(logFile)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, `{"state":"RUNNING","at_ms":`)
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSuffix(rest, "}"), 10, 64)
		if err != nil {
			return 0
		}
		return time.UnixMilli(ms).Sub(start)
	}
	return 0
}
