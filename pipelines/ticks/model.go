package ticks

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
)

// Status is a job's state-machine status.
type Status string

// Job statuses (seed 002, docs/pipelines/ticks.md).
const (
	StatusPending   Status = "PENDING"
	StatusRunning   Status = "RUNNING"
	StatusCompleted Status = "COMPLETED"
	StatusFailed    Status = "FAILED"
	StatusStalled   Status = "STALLED"
)

// Task kinds on ingest.tasks.
const (
	// KindTrigger starts a new job instance (from the trigger API, the CLI
	// or a supervisor re-trigger).
	KindTrigger = "trigger"
	// KindSegment fetches one segment (the default when kind is empty).
	KindSegment = "segment"
	// KindStall asks the owner to mark a job STALLED (supervisor).
	KindStall = "stall"
	// KindBootstrap carries a job state rebuilt from the object store
	// (supervisor); the owner applies it only when it has no state.
	KindBootstrap = "bootstrap"
)

var symbolRE = regexp.MustCompile(`^[A-Z0-9][A-Z0-9.\-]{0,15}$`)

// ValidateSymbol accepts 1–16 upper-case letters, digits, '.' and '-'
// (e.g. NQ, FPT, BRK.B), starting with a letter or digit.
func ValidateSymbol(s string) error {
	if !symbolRE.MatchString(s) {
		return fmt.Errorf("symbol %q: want 1-16 characters of A-Z, 0-9, '.', '-'", s)
	}
	return nil
}

// ValidateDate accepts a valid YYYY-MM-DD date.
func ValidateDate(d string) error {
	if _, err := time.Parse(time.DateOnly, d); err != nil {
		return fmt.Errorf("date %q: want YYYY-MM-DD", d)
	}
	return nil
}

var accountRE = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,64}$`)

// ValidateAccount accepts 1–64 characters of letters, digits, '_' and '-'.
func ValidateAccount(a string) error {
	if !accountRE.MatchString(a) {
		return fmt.Errorf("account_id %q: want 1-64 characters of A-Z, a-z, 0-9, '_', '-'", a)
	}
	return nil
}

// JobKey is the record key of a job on ingest.tasks and ingest.jobs.
func JobKey(symbol, date string) string { return symbol + ":" + date }

// SplitJobKey is the inverse of JobKey.
func SplitJobKey(key string) (symbol, date string, err error) {
	symbol, date, ok := strings.Cut(key, ":")
	if !ok || ValidateSymbol(symbol) != nil || ValidateDate(date) != nil {
		return "", "", fmt.Errorf("job key %q: want SYMBOL:YYYY-MM-DD", key)
	}
	return symbol, date, nil
}

// Task is one record of ingest.tasks. Which fields matter depends on Kind.
type Task struct {
	Kind          string `json:"kind,omitempty"`
	JobKey        string `json:"job_key"`
	Symbol        string `json:"symbol"`
	Date          string `json:"date"`
	JobInstanceID string `json:"job_instance_id"`
	AccountID     string `json:"account_id,omitempty"`
	// StartTs is the first millisecond of the segment (segment).
	StartTs int64 `json:"start_ts,omitempty"`
	// EndTs is the last millisecond a backfill task covers (backfill
	// segments; 0 = the session end).
	EndTs int64 `json:"end_ts,omitempty"`
	// EndTime and CriticalRanges describe the session (trigger).
	StartTime      int64      `json:"start_time,omitempty"`
	EndTime        int64      `json:"end_time,omitempty"`
	CriticalRanges [][2]int64 `json:"critical_ranges,omitempty"`
	// ResumeFrom, when set on a trigger, keeps the cursor of the previous
	// instance (a stall re-trigger) instead of starting at the session open.
	ResumeFrom *int64 `json:"resume_from,omitempty"`
	RetryCount int    `json:"retry_count"`
	Backfill   bool   `json:"backfill"`
	// HeartbeatAt is the heartbeat the supervisor saw (stall).
	HeartbeatAt int64 `json:"heartbeat_at,omitempty"`
	// Retrigger asks the owner to start a new instance from the cursor after
	// marking the job STALLED (stall).
	Retrigger bool `json:"retrigger,omitempty"`
	// State and Gaps carry a rebuilt job (bootstrap); gaps are [start, end]
	// ranges, inclusive, without a segment file.
	State *JobState  `json:"state,omitempty"`
	Gaps  [][2]int64 `json:"gaps,omitempty"`
	// Redundant lists segment files of the job whose ticks are in other
	// files or gaps (bootstrap): the owner deletes them when it applies
	// the state, so that no tick is held twice.
	Redundant []string `json:"redundant,omitempty"`
	// RequestedAt is when the command was created, Unix ms.
	RequestedAt int64 `json:"requested_at,omitempty"`
}

// JobState is the value of a job's record on the compacted ingest.jobs.
type JobState struct {
	JobKey        string `json:"job_key"`
	Symbol        string `json:"symbol"`
	Date          string `json:"date"`
	AccountID     string `json:"account_id"`
	Status        Status `json:"status"`
	JobInstanceID string `json:"job_instance_id"`
	// Cursor is the high-water mark of the contiguous fetched range: every
	// tick at or before Cursor (Unix ms, inclusive) is in a segment file.
	// It starts at StartTime−1 and ends at EndTime.
	Cursor         int64      `json:"cursor"`
	StartTime      int64      `json:"start_time"`
	EndTime        int64      `json:"end_time"`
	HeartbeatAt    int64      `json:"heartbeat_at"`
	CriticalRanges [][2]int64 `json:"critical_ranges"`
	LastErrorType  string     `json:"last_error_type,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	// LastStart is the start_ts of the last main-line segment done.
	LastStart int64 `json:"last_start,omitempty"`
	// ChainOffset is the tasks-topic offset (in the job's partition) of the
	// command or segment task that last chained the main line: the trigger,
	// stall re-trigger or bootstrap that started the instance, or the
	// segment that last moved the cursor. Only a redelivery of that very
	// record (a crash after this state was written, before its offset was
	// committed) re-sends the main-line task from the cursor, which the
	// crash may have lost; any other duplicate is dropped, so a re-send
	// never becomes a second live chain. Absent in states written before
	// the field existed (nothing is re-sent for them).
	ChainOffset *int64 `json:"chain_offset,omitempty"`
	Segments    int    `json:"segments"`
	Ticks       int64  `json:"ticks"`
	Backfills   int    `json:"backfills,omitempty"`
	// Origin says how the instance was created: trigger, retrigger or
	// bootstrap.
	Origin    string `json:"origin,omitempty"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
}

// Progress is the fraction of the session covered by the cursor, 0..1.
func (s JobState) Progress() float64 {
	if s.EndTime <= s.StartTime {
		return 0
	}
	p := float64(s.Cursor-s.StartTime+1) / float64(s.EndTime-s.StartTime+1)
	return min(max(p, 0), 1)
}

// known reports whether s is one of the job statuses above.
func (s Status) known() bool {
	switch s {
	case StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusStalled:
		return true
	}
	return false
}

// Terminal reports whether no main-line task will run for the instance.
func (s JobState) Terminal() bool {
	return s.Status == StatusCompleted || s.Status == StatusFailed || s.Status == StatusStalled
}

func decodeTask(key, value []byte) (Task, error) {
	var t Task
	if err := json.Unmarshal(value, &t); err != nil {
		return t, fmt.Errorf("ingest task: %w", err)
	}
	if t.Kind == "" {
		t.Kind = KindSegment
	}
	if t.JobKey == "" {
		t.JobKey = string(key)
	}
	if t.JobKey != string(key) {
		return t, fmt.Errorf("ingest task: job_key %q differs from the record key %q", clip(t.JobKey), clip(string(key)))
	}
	if t.JobKey != JobKey(t.Symbol, t.Date) {
		return t, fmt.Errorf("ingest task: job_key %q does not match symbol %q and date %q", clip(t.JobKey), clip(t.Symbol), clip(t.Date))
	}
	if _, err := uuid.Parse(t.JobInstanceID); err != nil && t.Kind != KindBootstrap {
		return t, fmt.Errorf("ingest task: job_instance_id %q: %w", clip(t.JobInstanceID), err)
	}
	return t, nil
}

// sessionSlack is how far before its date and after the end of its date a
// trigger's session may lie (sessions of futures open the evening before,
// and time zones shift the date by up to a day).
const sessionSlack = 48 * time.Hour

// checkTrigger rejects a trigger command the Coordinator would not have
// sent (see checkJob).
func checkTrigger(t Task, now time.Time) error {
	return checkJob("trigger", now, t.Symbol, t.Date, t.AccountID, t.StartTime, t.EndTime)
}

// checkJob rejects the job a trigger or bootstrap command describes (what
// names the command in the error) as sanity_fail: an invalid symbol, date
// or account (rules ticks.symbol, ticks.date, ticks.account), a session
// that is empty, reversed or not around its date (ticks.session) — such a
// session would make the job page through the source far outside the day
// it names — or a session that has not ended at now (ticks.session): a
// source returns only the ticks up to now, and the job would be COMPLETED
// with part of the day. The Coordinator refuses a trigger until
// SessionSettle after the session end, so a worker clock up to that much
// behind the Coordinator's does not refuse the commands it sends.
func checkJob(what string, now time.Time, symbol, date, account string, start, end int64) error {
	dead := func(rule, format string, args ...any) error {
		return stages.DeadLetter(stages.ReasonSanityFail, rule, fmt.Errorf(what+": "+format, args...))
	}
	if ValidateSymbol(symbol) != nil {
		return dead("ticks.symbol", "symbol %q: want 1-16 characters of A-Z, 0-9, '.', '-'", clip(symbol))
	}
	day, err := time.Parse(time.DateOnly, date)
	if err != nil {
		return dead("ticks.date", "date %q: want YYYY-MM-DD", clip(date))
	}
	if account != "" && ValidateAccount(account) != nil {
		return dead("ticks.account", "account_id %q: want 1-64 characters of A-Z, a-z, 0-9, '_', '-'", clip(account))
	}
	if start <= 0 || end < start {
		return dead("ticks.session", "no valid session [%d, %d]", start, end)
	}
	lo, hi := day.Add(-sessionSlack).UnixMilli(), day.Add(24*time.Hour+sessionSlack).UnixMilli()
	if start < lo || end >= hi {
		return dead("ticks.session", "session [%d, %d] is not around %s (want within [%d, %d))", start, end, date, lo, hi)
	}
	if end >= now.UnixMilli() {
		return dead("ticks.session", "session of %s on %s ends at %s, after now (%s): a job is ingested once its session has ended",
			symbol, date, time.UnixMilli(end+1).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// RuleBootstrap is the dlq.rule of a bootstrap command whose rebuilt state
// does not fit its job (reason sanity_fail).
const RuleBootstrap = "ticks.bootstrap"

// checkBootstrap rejects a bootstrap command the Supervisor would not have
// sent, before any of it is applied: the job and session of its state as
// checkJob does for a trigger; a missing state, or one of another job
// (its tasks would go to another job key and the job would stay RUNNING
// with nothing chained); an instance that is not a UUID (every task it
// chains would be a decode error); a status that is not one of the five
// job statuses, empty included (the worker would store it as the job's
// status and export it as a label of sluice_ticks_job_transitions_total,
// and the supervisor's stall scan, which looks at RUNNING and PENDING
// jobs only, would never see the job) — every known status is accepted:
// Bootstrap sends RUNNING or COMPLETED, and a replayed PENDING, FAILED or
// STALLED state is applied as it is (chainTasks resumes the main line from
// the cursor unless the state is terminal); a cursor outside
// [start−1, end]; a gap
// that is reversed or does not start inside the session; a redundant file
// that is not a segment file of the job or that no object store accepts
// (rule ticks.bootstrap). Such a command is typed by hand (kcat): without
// these checks its symbol could make segment keys no store accepts, and a
// bad redundant key would be retried by the runtime for ever, blocking
// the partition.
func checkBootstrap(t Task, now time.Time) error {
	dead := func(format string, args ...any) error {
		return stages.DeadLetter(stages.ReasonSanityFail, RuleBootstrap, fmt.Errorf("bootstrap: "+format, args...))
	}
	st := t.State
	if st == nil || st.JobKey != t.JobKey {
		return dead("without a matching state")
	}
	if st.Symbol != t.Symbol || st.Date != t.Date {
		return dead("state of %q on %q for the job %q", clip(st.Symbol), clip(st.Date), clip(t.JobKey))
	}
	if err := checkJob("bootstrap", now, st.Symbol, st.Date, st.AccountID, st.StartTime, st.EndTime); err != nil {
		return err
	}
	if _, err := uuid.Parse(st.JobInstanceID); err != nil {
		return dead("job_instance_id %q: %w", clip(st.JobInstanceID), err)
	}
	if !st.Status.known() {
		return dead("status %q: want one of %s, %s, %s, %s, %s", clip(string(st.Status)),
			StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusStalled)
	}
	if st.Cursor < st.StartTime-1 || st.Cursor > st.EndTime {
		return dead("cursor %d outside the session [%d, %d]", st.Cursor, st.StartTime, st.EndTime)
	}
	for _, g := range t.Gaps {
		if g[0] > g[1] || g[0] < st.StartTime || g[0] > st.EndTime {
			return dead("gap [%d, %d] does not start inside the session [%d, %d]", g[0], g[1], st.StartTime, st.EndTime)
		}
	}
	for _, key := range t.Redundant {
		n, err := ParseSegmentKey(key)
		if err == nil {
			err = objstore.ValidKey(key)
		}
		if err == nil && (n.Symbol != st.Symbol || n.Date != st.Date) {
			err = fmt.Errorf("not under %s", SegmentPrefix(st.Symbol, st.Date))
		}
		if err != nil {
			return dead("redundant file %q: %w", clip(key), err)
		}
	}
	return nil
}

// clipLen bounds the bytes of a record field quoted in an error message.
const clipLen = 80

// clip shortens s for an error message. Error messages end up in the
// dlq.error header next to the original value: echoing a long field whole
// could make the dead letter larger than the broker accepts, and the DLQ
// write would then fail forever.
func clip(s string) string {
	if len(s) <= clipLen {
		return s
	}
	cut := clipLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}
