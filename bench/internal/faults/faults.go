// Package faults holds what the chaos runners (silverbench chaos and
// bench/chaos) share: injecting a fault into the local real stack
// (deploy/stack: a service stopped and started again, the partition
// leader killed) or into a pipeline process (kill -9), and reading what a
// run left behind (a group's lag, a topic's committed records, a metric of
// a process). Functions that restart services act on the stack in
// SLUICE_STACK_DIR: run them against a private stack, never one that
// others use. Nothing here holds state between calls; every function is
// safe for concurrent use unless its doc says otherwise.
package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages"
)

// Stack restarts the services of the local stack with its scripts.
type Stack struct {
	// Scripts is the directory of up.sh and down.sh (deploy/stack).
	Scripts string
}

// Run runs Scripts/script (up.sh or down.sh) for service, with the
// environment's SLUICE_STACK_DIR; its output goes to stderr.
func (s Stack) Run(script, service string) error {
	cmd := exec.Command("bash", filepath.Join(s.Scripts, script), service)
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", script, service, err)
	}
	return nil
}

// Restart stops service (down.sh), waits for down, and starts it again
// (up.sh, which returns once the service is healthy).
func (s Stack) Restart(service string, down time.Duration) error {
	if err := s.Run("down.sh", service); err != nil {
		return err
	}
	time.Sleep(down)
	return s.Run("up.sh", service)
}

// ServiceOf returns the deploy/stack service that the fault named fault
// stops and starts again (Stack.Restart): redis, postgres, minio (the
// object store) and broker (kafka: every node). ok is false for a fault
// that restarts no service (kill, leader …).
func ServiceOf(fault string) (service string, ok bool) {
	switch fault {
	case "redis", "postgres", "minio":
		return fault, true
	case "broker":
		return "kafka", true
	}
	return "", false
}

// KillLeader kills (SIGKILL) the broker leading partition 0 of topic, a
// node of the stack in SLUICE_STACK_DIR started with SLUICE_KAFKA_NODES=3,
// and returns its id.
func KillLeader(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	if len(md.Brokers) < 3 {
		return 0, fmt.Errorf("leader: %d broker(s); the scenario needs the 3-node stack (SLUICE_KAFKA_NODES=3)", len(md.Brokers))
	}
	leader := md.Topics[topic].Partitions[0].Leader
	pidfile := filepath.Join(os.Getenv("SLUICE_STACK_DIR"), "kafka", fmt.Sprintf("node%d", leader), "kafka.pid")
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, fmt.Errorf("leader: broker %d: %w", leader, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("leader: %s: %w", pidfile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("leader: kill broker %d (pid %d): %w", leader, pid, err)
	}
	return leader, nil
}

// Child is a started process, its output in a log file (Start) or where
// its command sends it (Run).
type Child struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has ended
	err     error         // cmd.Wait's result, set before done is closed
	logPath string
}

// Start starts cmd with its stdout and stderr appended to logPath.
func Start(cmd *exec.Cmd, logPath string) (*Child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	c, err := Run(cmd)
	if err != nil {
		logf.Close()
		return nil, err
	}
	c.logPath = logPath
	go func() { <-c.done; logf.Close() }()
	return c, nil
}

// Run starts cmd as it is configured and waits for it in the background.
func Run(cmd *exec.Cmd) (*Child, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c := &Child{cmd: cmd, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	return c, nil
}

// Done is closed once the process has ended; Err then says how.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is cmd.Wait's result once Done is closed.
func (c *Child) Err() error { return c.err }

// Diagnose returns whether the process has ended and the last lines of
// its log above INFO, for the report of a scenario that failed.
func (c *Child) Diagnose() string {
	state := "running"
	if done, err := c.Exited(); done {
		state = fmt.Sprintf("exited (%v)", err)
	}
	b, _ := os.ReadFile(c.logPath)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.HasPrefix(l, "panic") {
			keep = append(keep, l)
		}
	}
	if len(keep) > 12 {
		keep = append([]string{fmt.Sprintf("… %d earlier lines", len(keep)-12)}, keep[len(keep)-12:]...)
	}
	return fmt.Sprintf("%s: %s\n  %s", c.logPath, state, strings.Join(keep, "\n  "))
}

// Exited reports whether the process has ended, and how.
func (c *Child) Exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// Stop ends the process with sig (SIGKILL: at once, as kill -9), and with
// SIGKILL when it has not ended 30 s later. Stopping an ended process does
// nothing.
func (c *Child) Stop(sig syscall.Signal) {
	if done, _ := c.Exited(); done {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// GroupLag is the number of records of topics not committed by group.
func GroupLag(ctx context.Context, adm *kadm.Client, group string, topics ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return -1, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return -1, err
	}
	var lag int64
	var ferr error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			ferr = e.Err
			return
		}
		at := int64(0)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil {
			at = c.At
		}
		lag += max(0, e.Offset-at)
	})
	return lag, ferr
}

// AwaitStable waits until topic's last stable offset equals its high
// watermark on every partition: no transaction is open on it.
func AwaitStable(ctx context.Context, adm *kadm.Client, topic string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		hw, err1 := adm.ListEndOffsets(ctx, topic)
		lso, err2 := adm.ListCommittedOffsets(ctx, topic)
		open := 0
		if err1 == nil && err2 == nil {
			hw.Each(func(o kadm.ListedOffset) {
				if l, ok := lso.Lookup(o.Topic, o.Partition); !ok || l.Offset != o.Offset {
					open++
				}
			})
			if open == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d partition(s) with an open transaction after %s (%v, %v)", topic, open, limit, err1, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ReadCommitted waits (up to a minute) until no transaction is open on
// topic — a killed member's holds read_committed readers back until it is
// aborted — then calls fn for every committed record of topic, from the
// start, until a poll has been idle for 3 s. The runtime writes dead
// letters in transactions: their end offsets hold markers, so a reader
// cannot stop at "the record before the end offset".
func ReadCommitted(ctx context.Context, adm *kadm.Client, kopts []kgo.Opt, topic string, fn func(*kgo.Record)) error {
	if err := AwaitStable(ctx, adm, topic, time.Minute); err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("client closed")
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, e error) {
			if !errors.Is(e, context.DeadlineExceeded) {
				ferr = e
			}
		})
		if ferr != nil {
			return fmt.Errorf("read %s: %w", topic, ferr)
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			fn(r)
		})
		if n == 0 {
			return nil
		}
	}
}

// DLQCoordinates reads the dead-letter topic (see ReadCommitted) and
// returns the number of records and of distinct source coordinates
// (dlq.source.topic/partition/offset headers).
func DLQCoordinates(ctx context.Context, adm *kadm.Client, kopts []kgo.Opt, topic string) (records, distinct int, err error) {
	seen := map[string]bool{}
	err = ReadCommitted(ctx, adm, kopts, topic, func(r *kgo.Record) {
		records++
		var coord [3]string
		for _, h := range r.Headers {
			switch h.Key {
			case stages.HeaderSourceTopic:
				coord[0] = string(h.Value)
			case stages.HeaderSourcePartition:
				coord[1] = string(h.Value)
			case stages.HeaderSourceOffset:
				coord[2] = string(h.Value)
			}
		}
		seen[strings.Join(coord[:], "/")] = true
	})
	return records, len(seen), err
}

// Scrape fetches the Prometheus text exposition at url.
func Scrape(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// ErrNotExposed: the metric is not (yet) in the exposition.
var ErrNotExposed = errors.New("metric not exposed yet")

// ScrapeSum returns the sum of the series of metric at url whose labels
// contain label ("" for all).
func ScrapeSum(url, metric, label string) (float64, error) {
	text, err := Scrape(url)
	if err != nil {
		return 0, err
	}
	v, ok := MetricSum(text, metric, label)
	if !ok {
		return 0, ErrNotExposed
	}
	return v, nil
}

// MetricSum sums the series of metric in a text exposition whose labels
// contain label (e.g. `phase="write"`; "" for all).
func MetricSum(text, metric, label string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') || !strings.Contains(rest, label) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}
