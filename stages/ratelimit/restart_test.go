package ratelimit_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/stages/ratelimit"
)

// redisProc is a redis-server of one test, started, stopped and started
// again on one port and directory, as a restarted Redis pod is.
type redisProc struct {
	bin  string
	port int
	dir  string
	aof  bool
	cmd  *exec.Cmd
	done chan struct{}
}

func newRedisProc(t *testing.T, aof bool) *redisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("no redis-server on PATH: %v", err)
	}
	// The server is restarted on its port: one outside the ephemeral range,
	// which no outgoing connection can take while it is down.
	_, ps, err := net.SplitHostPort(testkit.ListenAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	p := &redisProc{bin: bin, port: port, dir: t.TempDir(), aof: aof}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(syscall.SIGKILL) })
	return p
}

func (p *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// start starts the server and waits until it answers PING.
func (p *redisProc) start() error {
	args := []string{"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--dir", p.dir, "--save", "",
		"--protected-mode", "no", "--daemonize", "no", "--logfile", ""}
	if p.aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	p.cmd = exec.Command(p.bin, args...)
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
	c := redis.NewClient(&redis.Options{Addr: p.addr()})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if err := c.Ping(context.Background()).Err(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready: %w", p.addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *redisProc) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

// A Redis restart in the middle of a run never makes the limiter grant
// more than a window allows, over 70 s with two restarts: without
// persistence (the windows come back empty), with the append-only file
// after a clean stop (nothing is lost), and with it after kill -9 (the
// unsynced last second may be lost). Two limiters (two processes) ask as
// fast as they are allowed; every grant's server time is checked against
// both windows. Without the guard, the run without persistence grants a
// second 20 in the first minute.
func TestLimiterSurvivesRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("70 s run")
	}
	t.Parallel()
	cases := []struct {
		name     string
		aof      bool
		sig      syscall.Signal
		wantLost bool // the guard must have detected a loss
		wantNone bool // and must not have (nothing was lost)
		srv      *redisProc
		res      restartRun
	}{
		{name: "no persistence, SIGTERM", sig: syscall.SIGTERM, wantLost: true},
		{name: "append-only file, SIGTERM", aof: true, sig: syscall.SIGTERM, wantNone: true},
		{name: "append-only file, kill -9", aof: true, sig: syscall.SIGKILL},
	}
	// The three 70 s runs go side by side (parallel subtests would be
	// limited to GOMAXPROCS at a time).
	var wg sync.WaitGroup
	for i := range cases {
		c := &cases[i]
		c.srv = newRedisProc(t, c.aof)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.res = runRestarts(c.srv, c.sig)
		}()
	}
	wg.Wait()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.res
			if r.err != nil {
				t.Fatal(r.err)
			}
			if len(r.grants) < restartMinute {
				t.Fatalf("%d grants, want at least %d", len(r.grants), restartMinute)
			}
			for _, w := range restartWindows() {
				if n, at := maxInWindow(r.grants, w.Size); n > w.Limit {
					t.Errorf("%d grants in the %s from %s, limit %d (grants: %s)", n, w.Size, at.Format(time.RFC3339Nano), w.Limit, fmtTimes(r.grants))
				}
			}
			if c.wantLost && r.lost == 0 {
				t.Errorf("the loss was not detected (sluice_ratelimit_state_lost_total 0)")
			}
			if c.wantNone && r.lost != 0 {
				t.Errorf("sluice_ratelimit_state_lost_total = %v, want 0: nothing was lost", r.lost)
			}
			t.Logf("%d grants, %v losses detected", len(r.grants), r.lost)
		})
	}
}

const restartMinute = 20

func restartWindows() []ratelimit.Window {
	return []ratelimit.Window{{Size: time.Minute, Limit: restartMinute}, {Size: time.Second, Limit: 2}}
}

// restartRun is the outcome of runRestarts.
type restartRun struct {
	grants []time.Time // server times, sorted
	lost   float64     // sluice_ratelimit_state_lost_total
	err    error
}

// runRestarts runs two limiters on srv for 70 s, stopping srv with sig at
// 12 s (the minute's grants are spent by then) and 40 s and starting it
// again 2 s later each time.
func runRestarts(srv *redisProc, sig syscall.Signal) restartRun {
	const run = 70 * time.Second
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	reg := prometheus.NewRegistry()
	var (
		mu  sync.Mutex
		res restartRun
		wg  sync.WaitGroup
	)
	for range 2 {
		rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
		defer rdb.Close()
		l, err := ratelimit.New(context.Background(), rdb, ratelimit.Config{Source: "restart", Windows: restartWindows()}, reg)
		if err != nil {
			return restartRun{err: err}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d, err := l.Allow(ctx, "acct")
				var pause time.Duration
				switch {
				case err != nil:
					pause = 100 * time.Millisecond
				case d.Allowed:
					mu.Lock()
					res.grants = append(res.grants, d.At)
					mu.Unlock()
				default:
					pause = min(d.Wait, time.Second)
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		}()
	}
	for _, at := range []time.Duration{12 * time.Second, 40 * time.Second} {
		time.Sleep(time.Until(begin.Add(at)))
		srv.stop(sig)
		time.Sleep(2 * time.Second)
		if err := srv.start(); err != nil {
			cancel()
			wg.Wait()
			return restartRun{err: err}
		}
	}
	wg.Wait()
	slices.SortFunc(res.grants, func(a, b time.Time) int { return a.Compare(b) })
	res.lost, res.err = lostCount(reg)
	return res
}

// maxInWindow returns the most grants within any interval [t, t+size) and
// where it starts; grants is sorted.
func maxInWindow(grants []time.Time, size time.Duration) (int, time.Time) {
	best, at, j := 0, time.Time{}, 0
	for i := range grants {
		for j < len(grants) && grants[j].Sub(grants[i]) < size {
			j++
		}
		if j-i > best {
			best, at = j-i, grants[i]
		}
	}
	return best, at
}

func fmtTimes(ts []time.Time) string {
	s := ""
	for _, t := range ts {
		s += t.Format("15:04:05.000") + " "
	}
	return s
}

// lostCount returns sluice_ratelimit_state_lost_total summed over sources.
func lostCount(reg *prometheus.Registry) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "sluice_ratelimit_state_lost_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum, nil
}
