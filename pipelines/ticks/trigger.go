package ticks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
)

// TriggerRequest is the body of POST /api/v1/ingest/trigger.
type TriggerRequest struct {
	Symbol    string `json:"symbol"`
	Date      string `json:"date"`
	AccountID string `json:"account_id"`
}

// TriggerResult describes the command sent for a trigger.
type TriggerResult struct {
	JobKey         string     `json:"job_key"`
	JobInstanceID  string     `json:"job_instance_id"`
	StartTime      int64      `json:"start_time"`
	EndTime        int64      `json:"end_time"`
	CriticalRanges [][2]int64 `json:"critical_ranges"`
	Partition      int32      `json:"partition"`
	Offset         int64      `json:"offset"`
}

// InputError is a trigger request the coordinator refuses (HTTP 400).
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Coordinator turns trigger requests into trigger commands on the tasks
// topic (seed 002's Coordinator). It does not write job state: the owner of
// the job's partition does, when it processes the command. It is safe for
// concurrent use.
type Coordinator struct {
	cl        *kgo.Client
	source    Source
	tasks     string
	jobs      string
	kopts     []kgo.Opt
	now       func() time.Time
	maxFuture time.Duration
	settle    time.Duration
}

// NewCoordinator returns a coordinator producing with cl (any partitioner
// that hashes keys like Kafka's default, e.g. franz-go's default) to
// cfg.TasksTopic; kopts are used to read cfg.JobsTopic for status queries.
func NewCoordinator(cl *kgo.Client, kopts []kgo.Opt, cfg Config) *Coordinator {
	cfg = cfg.withDefaults()
	return &Coordinator{cl: cl, source: cfg.Source, tasks: cfg.TasksTopic, jobs: cfg.JobsTopic, kopts: kopts, now: cfg.Now, maxFuture: 48 * time.Hour, settle: cfg.SessionSettle}
}

// Trigger validates req, creates a new job_instance_id, asks the source for
// the session's trading hours and sends the trigger command. Invalid input
// is an *InputError, and so is a session that has not ended at least
// Config.SessionSettle ago: during (or before) a session a source returns
// only the ticks up to now, and the job would be COMPLETED with part of
// the day.
func (c *Coordinator) Trigger(ctx context.Context, req TriggerRequest) (TriggerResult, error) {
	var errs []error
	if err := ValidateSymbol(req.Symbol); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateDate(req.Date); err != nil {
		errs = append(errs, err)
	} else if d, _ := time.Parse(time.DateOnly, req.Date); d.After(c.now().Add(c.maxFuture)) {
		errs = append(errs, fmt.Errorf("date %s is in the future", req.Date))
	}
	if err := ValidateAccount(req.AccountID); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return TriggerResult{}, &InputError{Err: errors.Join(errs...)}
	}
	sess, err := c.source.TradingHours(ctx, req.Symbol, req.Date)
	if err != nil {
		var se *SourceError
		if errors.As(err, &se) && !se.Transient {
			return TriggerResult{}, &InputError{Err: err}
		}
		return TriggerResult{}, fmt.Errorf("trading hours of %s on %s: %w", req.Symbol, req.Date, err)
	}
	if end, now := time.UnixMilli(sess.End+1), c.now(); now.Before(end.Add(c.settle)) {
		state := "has not ended yet"
		if !now.Before(end) {
			state = fmt.Sprintf("ended less than %s ago", c.settle)
		}
		return TriggerResult{}, &InputError{Err: fmt.Errorf("the session of %s on %s ends at %s and %s: trigger it from %s",
			req.Symbol, req.Date, end.UTC().Format(time.RFC3339), state, end.Add(c.settle).UTC().Format(time.RFC3339))}
	}
	t := Task{
		Kind: KindTrigger, JobKey: JobKey(req.Symbol, req.Date), Symbol: req.Symbol, Date: req.Date,
		JobInstanceID: uuid.NewString(), AccountID: req.AccountID,
		StartTime: sess.Start, EndTime: sess.End, CriticalRanges: sess.CriticalRanges,
	}
	rec, err := c.send(ctx, t)
	if err != nil {
		return TriggerResult{}, err
	}
	return TriggerResult{JobKey: t.JobKey, JobInstanceID: t.JobInstanceID, StartTime: sess.Start, EndTime: sess.End,
		CriticalRanges: sess.CriticalRanges, Partition: rec.Partition, Offset: rec.Offset}, nil
}

// send produces a command keyed by its job key and waits for the ack.
func (c *Coordinator) send(ctx context.Context, t Task) (*kgo.Record, error) {
	t.JobKey = JobKey(t.Symbol, t.Date)
	t.RequestedAt = c.now().UnixMilli()
	v, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", t.Kind, err)
	}
	rec := &kgo.Record{Topic: c.tasks, Key: []byte(t.JobKey), Value: v}
	if err := c.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return nil, fmt.Errorf("send %s command for %s: %w", t.Kind, t.JobKey, err)
	}
	return rec, nil
}

// Jobs returns the state of every job, sorted by job key.
func (c *Coordinator) Jobs(ctx context.Context) ([]JobState, error) {
	all, err := ReadJobs(ctx, c.kopts, c.jobs, nil)
	if err != nil {
		return nil, err
	}
	var out []JobState
	for _, st := range Flatten(all) {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobKey < out[j].JobKey })
	return out, nil
}

// Routes returns the HTTP API: POST /api/v1/ingest/trigger,
// GET /api/v1/ingest/jobs and GET /api/v1/ingest/jobs/{job}.
func (c *Coordinator) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /api/v1/ingest/trigger":   http.HandlerFunc(c.handleTrigger),
		"GET /api/v1/ingest/jobs":       http.HandlerFunc(c.handleJobs),
		"GET /api/v1/ingest/jobs/{job}": http.HandlerFunc(c.handleJob),
	}
}

func (c *Coordinator) handleTrigger(w http.ResponseWriter, r *http.Request) {
	var req TriggerRequest
	if !opshttp.DecodeBody(w, r, &req, "{symbol, date, account_id}") {
		return
	}
	res, err := c.Trigger(r.Context(), req)
	var ie *InputError
	opshttp.WriteAccepted(w, res, err, errors.As(err, &ie))
}

func (c *Coordinator) handleJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := c.Jobs(r.Context())
	if err != nil {
		opshttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	opshttp.WriteJSON(w, http.StatusOK, jobs)
}

func (c *Coordinator) handleJob(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("job")
	if _, _, err := SplitJobKey(key); err != nil {
		opshttp.WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	st, err := ReadJob(r.Context(), c.kopts, c.jobs, key)
	switch {
	case err != nil:
		opshttp.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	case st == nil:
		opshttp.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "no job " + key})
	default:
		opshttp.WriteJSON(w, http.StatusOK, st)
	}
}
