package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/stages"
)

// RefreshAnswer is the answer to a refresh request: the module's current
// view and, when a request was produced (Accepted), its id, key and place
// on the refresh topic. A fresh module is not refreshed unless forced.
type RefreshAnswer struct {
	Accepted  bool       `json:"accepted"`
	Key       string     `json:"key"`
	RequestID string     `json:"request_id,omitempty"`
	Partition int32      `json:"partition"`
	Offset    int64      `json:"offset"`
	State     ModuleView `json:"state"`
}

// Refresh applies the rules to rec (a modules.refresh value as decoded,
// without a record key: ticker, module, force, job_id) and, unless the
// module is fresh and the request not forced, produces the normalised
// request with reason (ReasonAPI when empty) and waits for its ack. It
// never waits for the refresh. Bad input is an *InputError.
func (a *Assembler) Refresh(ctx context.Context, rec RefreshRecord, reason string) (RefreshAnswer, error) {
	cat, err := LoadCatalog(ctx, a.db)
	if err != nil {
		return RefreshAnswer{}, err
	}
	ticker, _ := jsonString(rec.Ticker)
	module, _ := jsonString(rec.Module)
	val, err := rec.Validate(Key(ticker, module), cat)
	if err != nil {
		return RefreshAnswer{}, inputError(err)
	}
	req := val.Request
	views, err := a.read(ctx, req.Ticker, []string{req.Module}, false)
	if err != nil {
		return RefreshAnswer{}, err
	}
	ans := RefreshAnswer{Key: req.Key(), State: views[0]}
	if !req.Force && Freshness(ans.State.Freshness) == FreshnessFresh {
		return ans, nil
	}
	if reason == "" {
		reason = ReasonAPI
	}
	req.Reason, req.RequestedAt, req.RequestID = reason, a.cfg.Now().UTC(), uuid.NewString()
	recs, err := a.produce(ctx, req)
	if err != nil {
		return RefreshAnswer{}, err
	}
	ans.Accepted, ans.RequestID, ans.Partition, ans.Offset = true, req.RequestID, recs[0].Partition, recs[0].Offset
	return ans, nil
}

// TickerStatus is the status of a ticker's modules.
type TickerStatus struct {
	Ticker  string       `json:"ticker"`
	Modules []ModuleView `json:"modules"`
}

// Status returns the rows of ticker_modules_status of ticker for module
// (empty: every enabled module; an absent row has freshness "absent"),
// without data. Bad input is an *InputError.
func (a *Assembler) Status(ctx context.Context, ticker, module string) (TickerStatus, error) {
	var mods []string
	if module != "" {
		mods = []string{module}
	}
	cat, err := LoadCatalog(ctx, a.db)
	if err != nil {
		return TickerStatus{}, err
	}
	t, mods, err := checkAssemble(AssembleRequest{Ticker: ticker, Modules: mods}, cat)
	if err != nil {
		return TickerStatus{}, err
	}
	views, err := a.read(ctx, t, mods, false)
	if err != nil {
		return TickerStatus{}, err
	}
	return TickerStatus{Ticker: t, Modules: views}, nil
}

// Job is an analysis job with its derived status (analysis_jobs_status)
// and the current view of its modules.
type Job struct {
	JobID          string          `json:"job_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Ticker         string          `json:"ticker"`
	JobType        string          `json:"job_type"`
	Status         string          `json:"status"`
	CreatedAt      time.Time       `json:"created_at"`
	Input          json.RawMessage `json:"input_data"`
	Modules        []ModuleView    `json:"modules"`
}

// ErrNoJob is returned by Job for an unknown job id.
var ErrNoJob = errors.New("no such job")

// Job returns the job jobID (a UUID, else an *InputError of
// modules.request), or ErrNoJob.
func (a *Assembler) Job(ctx context.Context, jobID string) (Job, error) {
	id, err := CheckJobID(jobID)
	if err == nil && id == "" {
		err = sanity(RuleRequest, "job_id is missing")
	}
	if err != nil {
		return Job{}, inputError(err)
	}
	var j Job
	var mods []string
	err = a.db.QueryRow(ctx, `SELECT job_id::text, idempotency_key, ticker::text, job_type, status, created_at, input_data, modules
FROM analysis_jobs_status WHERE job_id = $1`, id).Scan(&j.JobID, &j.IdempotencyKey, &j.Ticker, &j.JobType, &j.Status,
		&j.CreatedAt, &j.Input, &mods)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	if err != nil {
		return Job{}, fmt.Errorf("modules: read job %s: %w", id, err)
	}
	j.CreatedAt = j.CreatedAt.UTC()
	if j.Modules, err = a.read(ctx, j.Ticker, mods, false); err != nil {
		return Job{}, err
	}
	return j, nil
}

// Catalog returns the analysis catalog, disabled modules included.
func (a *Assembler) Catalog(ctx context.Context) (Catalog, error) { return LoadCatalog(ctx, a.db) }

// Routes returns the HTTP API, to be mounted behind the ops server's write
// guard:
//
//	POST /api/v1/modules/refresh {ticker, module, force}: 200 and the state
//	  when the module is fresh and force is not set, else 202 once the
//	  request is produced; alias POST /ingest/{module}?ticker=T[&force=true]
//	  with the module's '_' written '-' (e.g. /ingest/options-flow).
//	GET /api/v1/modules/status?ticker=T[&module=M]
//	POST /api/v1/modules/analysis {ticker, modules?}: the assemble; alias
//	  POST /ai/ticker-activity-analysis.
//	GET /api/v1/modules/jobs/{job_id}
//
// Bad input is answered 400 with {"error", "rule"} (the rule id; empty for
// a body that is not a JSON object), an unknown job 404, a Postgres or
// Kafka failure 503.
func (a *Assembler) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /api/v1/modules/refresh":      http.HandlerFunc(a.handleRefresh),
		"POST /ingest/{module}":             http.HandlerFunc(a.handleIngest),
		"GET /api/v1/modules/status":        http.HandlerFunc(a.handleStatus),
		"POST /api/v1/modules/analysis":     http.HandlerFunc(a.handleAnalysis),
		"POST /ai/ticker-activity-analysis": http.HandlerFunc(a.handleAnalysis),
		"GET /api/v1/modules/jobs/{job_id}": http.HandlerFunc(a.handleJob),
	}
}

// apiError is the body of an error answer.
type apiError struct {
	Error string `json:"error"`
	Rule  string `json:"rule"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr answers err: 400 for an *InputError, 404 for ErrNoJob, else 503.
func writeErr(w http.ResponseWriter, err error) {
	var ie *InputError
	switch {
	case errors.As(err, &ie):
		writeJSON(w, http.StatusBadRequest, apiError{Error: ie.Err.Error(), Rule: ie.Rule})
	case errors.Is(err, ErrNoJob):
		writeJSON(w, http.StatusNotFound, apiError{Error: err.Error()})
	default:
		writeJSON(w, http.StatusServiceUnavailable, apiError{Error: err.Error()})
	}
}

// readBody reads a request body of at most 64 KiB.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return nil, &InputError{Err: fmt.Errorf("read body: %w", err)}
	}
	return b, nil
}

func (a *Assembler) handleRefresh(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	rec, err := DecodeRefresh(nil, body)
	if err != nil {
		writeErr(w, inputError(err))
		return
	}
	a.answerRefresh(w, r.Context(), rec)
}

func (a *Assembler) handleIngest(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rec := RefreshRecord{
		Ticker: jsonRaw(q.Get("ticker")),
		Module: jsonRaw(strings.ReplaceAll(r.PathValue("module"), "-", "_")),
	}
	if f := q.Get("force"); f != "" {
		force, err := strconv.ParseBool(f)
		if err != nil {
			writeErr(w, inputError(sanity(RuleRequest, "force %q is not a boolean", clip(f))))
			return
		}
		rec.Force = jsonRaw(force)
	}
	a.answerRefresh(w, r.Context(), rec)
}

func (a *Assembler) answerRefresh(w http.ResponseWriter, ctx context.Context, rec RefreshRecord) {
	ans, err := a.Refresh(ctx, rec, ReasonAPI)
	switch {
	case err != nil:
		writeErr(w, err)
	case ans.Accepted:
		writeJSON(w, http.StatusAccepted, ans)
	default:
		writeJSON(w, http.StatusOK, ans)
	}
}

// jsonRaw encodes v, or returns nil (absent) for an empty string.
func jsonRaw(v any) json.RawMessage {
	if s, ok := v.(string); ok && s == "" {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

func (a *Assembler) handleStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, err := a.Status(r.Context(), q.Get("ticker"), q.Get("module"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *Assembler) handleAnalysis(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	req, err := decodeAssemble(body)
	if err != nil {
		writeErr(w, err)
		return
	}
	out, err := a.Assemble(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// decodeAssemble decodes {ticker, modules?}: a body that is not a JSON
// object is an *InputError without rule, a ticker that is not a string
// modules.ticker, modules that are not an array of strings modules.module.
func decodeAssemble(body []byte) (AssembleRequest, error) {
	var w struct {
		Ticker, Modules json.RawMessage
	}
	if err := decodeObject(body, &w); err != nil {
		return AssembleRequest{}, inputError(stages.DeadLetter(stages.ReasonDecodeError, "",
			fmt.Errorf("body must be a JSON object {ticker, modules?}: %w", err)))
	}
	var req AssembleRequest
	if !isNull(w.Ticker) {
		s, ok := jsonString(w.Ticker)
		if !ok {
			return req, inputError(sanity(RuleTicker, "ticker %s is not a string", clip(string(w.Ticker))))
		}
		req.Ticker = s
	}
	if !isNull(w.Modules) {
		if err := json.Unmarshal(w.Modules, &req.Modules); err != nil {
			return req, inputError(sanity(RuleModule, "modules %s is not an array of strings", clip(string(w.Modules))))
		}
	}
	return req, nil
}

func (a *Assembler) handleJob(w http.ResponseWriter, r *http.Request) {
	j, err := a.Job(r.Context(), r.PathValue("job_id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}
