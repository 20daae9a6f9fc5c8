package ticks

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// Supervisor watches job heartbeats and rebuilds lost job state. It never
// writes job state itself: it sends stall and bootstrap commands on the
// tasks topic, and the owner of the job's partition applies them (so the
// owner stays the only writer). It is safe for concurrent use.
type Supervisor struct {
	cfg   Config
	coord *Coordinator
	store objstore.Store
	log   *slog.Logger
	ready atomic.Bool
}

// NewSupervisor returns a supervisor sending commands through coord.
func NewSupervisor(cfg Config, coord *Coordinator, store objstore.Store, log *slog.Logger) *Supervisor {
	if log == nil {
		log = slog.Default()
	}
	return &Supervisor{cfg: cfg.withDefaults(), coord: coord, store: store, log: log.With("service", "ticks-supervisor")}
}

// Name implements pipelines.Service.
func (s *Supervisor) Name() string { return "ticks-supervisor" }

// Ready implements pipelines.Service: true once the first scan finished.
func (s *Supervisor) Ready() bool { return s.ready.Load() }

// Run bootstraps once when configured, then scans for stalled jobs every
// Supervisor.Interval until ctx is cancelled. Scan errors are logged and
// retried at the next interval.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.cfg.Supervisor.BootstrapOnStart {
		if rep, err := s.Bootstrap(ctx); err != nil {
			s.log.Error("bootstrap failed", "err", err)
		} else {
			s.log.Info("bootstrap done", "rebuilt", rep.Rebuilt, "gaps", rep.Gaps)
		}
	}
	t := time.NewTicker(s.cfg.Supervisor.Interval)
	defer t.Stop()
	for {
		if _, err := s.ScanStalls(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("stall scan failed", "err", err)
		} else {
			s.ready.Store(true)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ScanStalls reads every job state and sends a stall command for each
// RUNNING or PENDING job whose heartbeat is older than StallAfter; it
// returns the job keys it reported.
func (s *Supervisor) ScanStalls(ctx context.Context) ([]string, error) {
	all, err := ReadJobs(ctx, s.coord.kopts, s.cfg.JobsTopic, nil)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	var keys []string
	for _, st := range Flatten(all) {
		if st.Status != StatusRunning && st.Status != StatusPending {
			continue
		}
		age := now.Sub(time.UnixMilli(st.HeartbeatAt))
		if age <= s.cfg.Supervisor.StallAfter {
			continue
		}
		t := Task{Kind: KindStall, Symbol: st.Symbol, Date: st.Date, JobInstanceID: st.JobInstanceID,
			AccountID: st.AccountID, HeartbeatAt: st.HeartbeatAt, Retrigger: s.cfg.Supervisor.Retrigger}
		if _, err := s.coord.send(ctx, t); err != nil {
			return keys, err
		}
		s.log.Warn("job heartbeat too old", "job", st.JobKey, "age", age.Round(time.Second), "retrigger", t.Retrigger)
		keys = append(keys, st.JobKey)
	}
	sort.Strings(keys)
	return keys, nil
}

// BootstrapReport says what Bootstrap did.
type BootstrapReport struct {
	// Rebuilt lists the job keys whose state was rebuilt.
	Rebuilt []string
	// Gaps is the number of backfill tasks sent.
	Gaps int
	// Unreadable lists segment files that could not be read.
	Unreadable []string
}

// Bootstrap rebuilds the state of every job that has segment files in the
// object store but no state in the jobs topic: the instance of the file
// with the latest range becomes the job's instance, the end of the covered
// ranges its cursor, and every hole between the session start and the
// cursor becomes a backfill task (backfill=true: it never moves the
// cursor). The rebuilt state is sent as a bootstrap command; the owner
// applies it only if it still has no state for the job.
func (s *Supervisor) Bootstrap(ctx context.Context) (BootstrapReport, error) {
	var rep BootstrapReport
	all, err := ReadJobs(ctx, s.coord.kopts, s.cfg.JobsTopic, nil)
	if err != nil {
		return rep, err
	}
	have := Flatten(all)
	infos, err := s.store.List(ctx, "ticks/")
	if err != nil {
		return rep, fmt.Errorf("list segment files: %w", err)
	}
	jobs := map[string]bool{}
	for _, in := range infos {
		if n, err := ParseSegmentKey(in.Key); err == nil {
			jobs[JobKey(n.Symbol, n.Date)] = true
		}
	}
	keys := make([]string, 0, len(jobs))
	for k := range jobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if have[key] != nil {
			continue
		}
		symbol, date, err := SplitJobKey(key)
		if err != nil {
			continue
		}
		st, gaps, bad, err := s.rebuild(ctx, symbol, date)
		rep.Unreadable = append(rep.Unreadable, bad...)
		if err != nil {
			return rep, err
		}
		if st == nil {
			continue
		}
		t := Task{Kind: KindBootstrap, Symbol: symbol, Date: date, JobInstanceID: st.JobInstanceID, AccountID: st.AccountID, State: st, Gaps: gaps}
		if _, err := s.coord.send(ctx, t); err != nil {
			return rep, err
		}
		s.log.Info("job state rebuilt", "job", key, "instance", st.JobInstanceID, "cursor", st.Cursor, "status", st.Status, "gaps", gaps)
		rep.Rebuilt = append(rep.Rebuilt, key)
		rep.Gaps += len(gaps)
	}
	return rep, nil
}

// rebuild derives a job's state and gaps from its segment files.
func (s *Supervisor) rebuild(ctx context.Context, symbol, date string) (*JobState, [][2]int64, []string, error) {
	segs, bad, err := ListSegments(ctx, s.store, symbol, date)
	if err != nil || len(segs) == 0 {
		return nil, nil, bad, err
	}
	sess, err := s.cfg.Source.TradingHours(ctx, symbol, date)
	if err != nil {
		return nil, nil, bad, fmt.Errorf("trading hours of %s on %s: %w", symbol, date, err)
	}
	latest := segs[0]
	covered := sess.Start - 1
	var gaps [][2]int64
	var ticks int64
	for _, sg := range segs {
		if sg.RangeStart > covered+1 {
			gaps = append(gaps, [2]int64{covered + 1, sg.RangeStart - 1})
		}
		covered = max(covered, sg.RangeEnd)
		ticks += sg.Rows
		if sg.RangeStart >= latest.RangeStart {
			latest = sg
		}
	}
	now := s.cfg.Now().UnixMilli()
	st := &JobState{
		JobKey: JobKey(symbol, date), Symbol: symbol, Date: date, AccountID: latest.Account,
		Status: StatusRunning, JobInstanceID: latest.Instance, Cursor: covered,
		StartTime: sess.Start, EndTime: sess.End, HeartbeatAt: now, CriticalRanges: sess.CriticalRanges,
		Segments: len(segs), Ticks: ticks, Origin: "bootstrap", CreatedAt: now,
	}
	if strings.TrimSpace(st.AccountID) == "" {
		st.AccountID = s.cfg.DefaultAccount
	}
	if covered >= sess.End {
		st.Cursor, st.Status = sess.End, StatusCompleted
	}
	return st, gaps, bad, nil
}
