package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/topics"
)

// DefaultAssembleBudget is how long an assemble may take
// (MODULES_ASSEMBLE_BUDGET): a synthesis not finished by then is dropped.
const DefaultAssembleBudget = 5 * time.Second

// Reasons of refresh requests produced by this package.
const (
	ReasonAssemble = "assemble"
	ReasonAPI      = "api"
)

// AssembleDB is what the assembler and the API read and call in
// PostgreSQL; *pgxpool.Pool implements it. Names resolve through the
// connection's search_path.
type AssembleDB interface {
	Querier
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Producer produces records and waits for their acks; *kgo.Client
// implements it (any partitioner hashing keys like Kafka's default).
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// AssembleConfig configures an Assembler. Zero values take the defaults.
type AssembleConfig struct {
	// RefreshTopic receives the refresh requests (topics.ModulesRefresh).
	RefreshTopic string
	// Budget bounds an assemble (DefaultAssembleBudget).
	Budget time.Duration
	// Synthesizer writes the synthesis (Template).
	Synthesizer Synthesizer
	// Now is the clock of the idempotency key's hour and of request times
	// (time.Now).
	Now func() time.Time
}

func (c AssembleConfig) withDefaults() AssembleConfig {
	if c.RefreshTopic == "" {
		c.RefreshTopic = topics.ModulesRefresh
	}
	if c.Budget <= 0 {
		c.Budget = DefaultAssembleBudget
	}
	if c.Synthesizer == nil {
		c.Synthesizer = Template{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Assembler answers assemble requests and API refresh requests from
// Postgres (the view ticker_modules_status, the snapshots and analyses,
// analysis jobs) and produces refresh requests to modules.refresh. It
// never waits for a refresh. It is safe for concurrent use.
type Assembler struct {
	db      AssembleDB
	prod    Producer
	cfg     AssembleConfig
	metrics *apiMetrics
}

// NewAssembler returns an assembler reading db and producing with prod;
// its metrics (sluice_modules_assemble_total, sluice_modules_jobs_total)
// are registered on reg (an existing registration of the same metrics is
// reused).
func NewAssembler(db AssembleDB, prod Producer, reg prometheus.Registerer, cfg AssembleConfig) (*Assembler, error) {
	m, err := newAPIMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Assembler{db: db, prod: prod, cfg: cfg.withDefaults(), metrics: m}, nil
}

// InputError is a request refused for bad input (HTTP 400): Rule is the
// rule id it failed.
type InputError struct {
	Rule string
	Err  error
}

func (e *InputError) Error() string { return e.Rule + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// inputError turns a rule failure (a dead letter of the rules) into an
// *InputError carrying its rule and the failure's own error.
func inputError(err error) error {
	var de *stages.Error
	if errors.As(err, &de) && de.Err != nil {
		return &InputError{Rule: de.Rule, Err: de.Err}
	}
	return &InputError{Err: err}
}

// AssembleRequest asks for the modules of a ticker (nil or empty: every
// enabled module).
type AssembleRequest struct {
	Ticker  string   `json:"ticker"`
	Modules []string `json:"modules,omitempty"`
}

// ModuleView is one module of a ticker as assembled: its row of
// ticker_modules_status (Freshness "absent" when there is none), the
// snapshot payload and the analysis when served, and whether a refresh was
// requested.
type ModuleView struct {
	Module            string          `json:"module"`
	Status            string          `json:"status"`
	Freshness         string          `json:"freshness"`
	CanServeStale     bool            `json:"can_serve_stale"`
	RefreshInProgress bool            `json:"refresh_in_progress"`
	DataDate          string          `json:"data_date,omitempty"`
	FetchedAt         *time.Time      `json:"fetched_at,omitempty"`
	ExpiresAt         *time.Time      `json:"expires_at,omitempty"`
	InputHash         string          `json:"input_hash,omitempty"`
	LastError         string          `json:"last_error,omitempty"`
	UpdatedAt         *time.Time      `json:"updated_at,omitempty"`
	Served            bool            `json:"served"`
	Data              json.RawMessage `json:"data,omitempty"`
	Analysis          *UnitAnalysis   `json:"analysis,omitempty"`
}

// FreshnessAbsent is a module's freshness when it has no row.
const FreshnessAbsent = "absent"

// needsRefresh reports whether the module is missing, stale, expired or
// absent.
func (v ModuleView) needsRefresh() bool {
	switch Freshness(v.Freshness) {
	case FreshnessMissing, FreshnessStale, FreshnessExpired, FreshnessAbsent:
		return true
	}
	return false
}

// servable reports whether the module's data may be served: fresh, or old
// but within the module's max_stale.
func (v ModuleView) servable() bool {
	return Freshness(v.Freshness) == FreshnessFresh || v.CanServeStale
}

// UnitAnalysis is a unit_analyses row.
type UnitAnalysis struct {
	AnalysisVersion int             `json:"analysis_version"`
	Result          json.RawMessage `json:"result"`
	AnalyzedAt      time.Time       `json:"analyzed_at"`
	ExpiresAt       time.Time       `json:"expires_at"`
}

// JobRef is the analysis job of an assemble and the refreshes it asked
// for. RefreshError is set when producing them failed: the job was then
// removed so that the next request creates it again.
type JobRef struct {
	JobID          string   `json:"job_id"`
	IdempotencyKey string   `json:"idempotency_key"`
	Status         string   `json:"status"`
	Created        bool     `json:"created"`
	Modules        []string `json:"modules"`
	Refreshed      []string `json:"refresh_requested,omitempty"`
	RefreshError   string   `json:"refresh_error,omitempty"`
}

// Assembly is the answer to an assemble request. Synthesis is nil when the
// synthesizer failed or did not finish within the budget; Degraded is then
// true (and when the refresh requests could not be produced).
type Assembly struct {
	Ticker      string       `json:"ticker"`
	Modules     []ModuleView `json:"modules"`
	Missing     []string     `json:"missing"`
	Job         *JobRef      `json:"job"`
	Synthesis   *Synthesis   `json:"synthesis"`
	Degraded    bool         `json:"degraded"`
	GeneratedAt time.Time    `json:"generated_at"`
}

// Assemble answers req within the budget: it reads the modules' rows,
// creates (get_or_create_job) the job of the modules missing, stale,
// expired or absent and, only when the job was created, produces one
// refresh request per such module (reason assemble, the job's id); it
// serves each module's snapshot and analysis (the analysis of the row's
// input hash) when the module is fresh or can serve stale data, lists the
// others in Missing, and adds the synthesis unless it is late or fails.
// The job's modules and idempotency key are those of the modules needing a
// refresh, so that the job's derived status follows their refreshes.
// Bad input is an *InputError.
func (a *Assembler) Assemble(ctx context.Context, req AssembleRequest) (Assembly, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Budget)
	defer cancel()
	cat, err := LoadCatalog(ctx, a.db)
	if err != nil {
		return Assembly{}, err
	}
	ticker, mods, err := checkAssemble(req, cat)
	if err != nil {
		return Assembly{}, err
	}
	now := a.cfg.Now()
	views, err := a.read(ctx, ticker, mods, true)
	if err != nil {
		return Assembly{}, err
	}
	out := Assembly{Ticker: ticker, Modules: views, Missing: []string{}, GeneratedAt: now.UTC()}
	var stale []string
	for _, v := range views {
		if v.needsRefresh() {
			stale = append(stale, v.Module)
		}
		if !v.Served {
			out.Missing = append(out.Missing, v.Module)
		}
	}
	if len(stale) > 0 {
		job, err := a.job(ctx, ticker, stale, now)
		if err != nil {
			return Assembly{}, err
		}
		out.Job = job
		out.Degraded = job.RefreshError != ""
	}
	syn, ok := a.synthesize(ctx, out)
	if ok {
		out.Synthesis = &syn
	} else {
		out.Degraded = true
	}
	result := "ok"
	if out.Degraded {
		result = "degraded"
	}
	a.metrics.assemble.WithLabelValues(result).Inc()
	return out, nil
}

// checkAssemble applies the rules to req: the ticker, then each module
// (modules.module, modules.unknown_module). It returns the normalised
// ticker and the sorted unique modules (every enabled one by default).
func checkAssemble(req AssembleRequest, cat Catalog) (string, []string, error) {
	ticker, err := CheckTicker(req.Ticker)
	if err != nil {
		return "", nil, inputError(err)
	}
	mods := slices.Clone(req.Modules)
	if len(mods) == 0 {
		mods = sortedModules(cat)
	}
	for _, m := range mods {
		if err := CheckModule(m); err != nil {
			return "", nil, inputError(err)
		}
		if _, err := CheckKnownModule(m, cat); err != nil {
			return "", nil, inputError(err)
		}
	}
	slices.Sort(mods)
	return ticker, slices.Compact(mods), nil
}

// read returns the views of ticker's modules mods, in mods' order, one
// per module (absent ones included), read in one statement so that every
// freshness is derived at one NOW(). With serve, the snapshot payload and
// the analysis of each servable module are included.
func (a *Assembler) read(ctx context.Context, ticker string, mods []string, serve bool) ([]ModuleView, error) {
	rows, err := a.db.Query(ctx, `SELECT s.module_id, s.status, s.freshness_status, s.can_serve_stale, s.refresh_in_progress,
	s.data_date::text, s.fetched_at, s.expires_at, s.last_error, t.input_hash, t.updated_at,
	ua.analysis_version, ua.result, ua.analyzed_at, ua.expires_at, ms.payload
FROM ticker_modules_status s
JOIN ticker_data_modules t ON t.ticker = s.ticker AND t.module_id = s.module_id
LEFT JOIN LATERAL (SELECT u.analysis_version, u.result, u.analyzed_at, u.expires_at FROM unit_analyses u
	WHERE $3 AND (s.freshness_status = 'fresh' OR s.can_serve_stale)
	AND u.ticker = t.ticker AND u.module_id = t.module_id AND u.input_hash = t.input_hash
	ORDER BY u.analyzed_at DESC, u.id DESC LIMIT 1) ua ON true
LEFT JOIN module_snapshots ms ON $3 AND (s.freshness_status = 'fresh' OR s.can_serve_stale)
	AND ms.ticker = t.ticker AND ms.module_id = t.module_id AND ms.input_hash = t.input_hash
WHERE s.ticker = $1 AND s.module_id = ANY($2)`, ticker, mods, serve)
	if err != nil {
		return nil, fmt.Errorf("modules: read the status of %s: %w", ticker, err)
	}
	found := map[string]ModuleView{}
	var (
		v                   ModuleView
		dataDate, lastError *string
		inputHash           *string
		version             *int
		result, payload     []byte
		analyzed, aExpires  *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&v.Module, &v.Status, &v.Freshness, &v.CanServeStale, &v.RefreshInProgress,
		&dataDate, &v.FetchedAt, &v.ExpiresAt, &lastError, &inputHash, &v.UpdatedAt,
		&version, &result, &analyzed, &aExpires, &payload}, func() error {
		e := v
		e.DataDate, e.LastError, e.InputHash = deref(dataDate), deref(lastError), deref(inputHash)
		if version != nil && analyzed != nil && aExpires != nil {
			e.Analysis = &UnitAnalysis{AnalysisVersion: *version, Result: slices.Clone(result),
				AnalyzedAt: analyzed.UTC(), ExpiresAt: aExpires.UTC()}
		}
		if payload != nil {
			e.Data = slices.Clone(payload)
			e.Served = true
		}
		found[e.Module] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("modules: read the status of %s: %w", ticker, err)
	}
	out := make([]ModuleView, 0, len(mods))
	for _, m := range mods {
		if fv, ok := found[m]; ok {
			out = append(out, fv)
			continue
		}
		out = append(out, ModuleView{Module: m, Status: string(StatusMissing), Freshness: FreshnessAbsent})
	}
	return out, nil
}

// job gets or creates the analysis job of ticker's modules at now and,
// when this call created it, produces one refresh request per module.
func (a *Assembler) job(ctx context.Context, ticker string, mods []string, now time.Time) (*JobRef, error) {
	key := IdempotencyKey(ticker, JobTypeTickerActivity, mods, now)
	input, err := json.Marshal(map[string]any{"modules": mods})
	if err != nil {
		return nil, fmt.Errorf("modules: encode job input: %w", err)
	}
	j := &JobRef{IdempotencyKey: key, Modules: mods}
	if err := a.db.QueryRow(ctx, `SELECT job_id::text, status, created FROM get_or_create_job($1, $2, $3, $4)`,
		key, ticker, JobTypeTickerActivity, input).Scan(&j.JobID, &j.Status, &j.Created); err != nil {
		return nil, fmt.Errorf("modules: get_or_create_job %s: %w", key, err)
	}
	a.metrics.jobs.WithLabelValues(fmt.Sprint(j.Created)).Inc()
	if !j.Created {
		return j, nil
	}
	reqs := make([]RefreshRequest, len(mods))
	for i, m := range mods {
		reqs[i] = RefreshRequest{Ticker: ticker, Module: m, Reason: ReasonAssemble, JobID: j.JobID,
			RequestedAt: now.UTC(), RequestID: uuid.NewString()}
	}
	if _, err := a.produce(ctx, reqs...); err != nil {
		// Without its refreshes the job would stay pending for the hour:
		// remove it so that the next request creates it again.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, derr := a.db.Exec(dctx, `DELETE FROM analysis_jobs WHERE job_id = $1`, j.JobID); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove job %s: %w", j.JobID, derr))
		}
		j.RefreshError = err.Error()
		return j, nil
	}
	j.Refreshed = mods
	return j, nil
}

// produce sends reqs to the refresh topic, keyed Key(ticker, module), and
// waits for their acks; it returns the produced records.
func (a *Assembler) produce(ctx context.Context, reqs ...RefreshRequest) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, len(reqs))
	for i, r := range reqs {
		v, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("modules: encode refresh request: %w", err)
		}
		recs[i] = &kgo.Record{Topic: a.cfg.RefreshTopic, Key: []byte(r.Key()), Value: v}
	}
	if err := a.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("modules: produce refresh requests to %s: %w", a.cfg.RefreshTopic, err)
	}
	return recs, nil
}

// synthesize runs the synthesizer on out within ctx's deadline; ok is
// false when it failed or was late (its result is then dropped).
func (a *Assembler) synthesize(ctx context.Context, out Assembly) (Synthesis, bool) {
	type answer struct {
		s   Synthesis
		err error
	}
	ch := make(chan answer, 1)
	in := SynthesisInput{Ticker: out.Ticker, Modules: out.Modules, Missing: out.Missing, Now: out.GeneratedAt}
	go func() {
		s, err := a.cfg.Synthesizer.Synthesize(ctx, in)
		ch <- answer{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err == nil
	case <-ctx.Done():
		return Synthesis{}, false
	}
}

// sortedModules returns the catalog's enabled module ids, sorted.
func sortedModules(cat Catalog) []string {
	var ids []string
	for id, m := range cat {
		if m.Enabled {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// ParseAssembleBudget reads MODULES_ASSEMBLE_BUDGET (a Go duration > 0)
// through getenv; unset is DefaultAssembleBudget.
func ParseAssembleBudget(getenv func(string) string) (time.Duration, error) {
	v := getenv("MODULES_ASSEMBLE_BUDGET")
	if v == "" {
		return DefaultAssembleBudget, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("modules: MODULES_ASSEMBLE_BUDGET=%q is not a positive duration", v)
	}
	return d, nil
}

// ProducerOpts returns kafka's options plus those of a client producing
// refresh requests or states that someone waits for (an API answer, an
// upstream call, the mirror): no linger, since each produce is awaited
// (franz-go's default lingers 10 ms per partition); records queued while a
// request is in flight are still batched.
func ProducerOpts(kafka []kgo.Opt) []kgo.Opt {
	return append(append([]kgo.Opt{}, kafka...), kgo.ProducerLinger(0))
}

// MountAPI builds an Assembler on env.DB producing with a Kafka client of
// its own (env.Kafka; closed through r) and mounts its Routes on env.Ops
// (behind the ops server's write guard). It does nothing when env.Ops is
// nil.
func MountAPI(env pipelines.Env, cfg AssembleConfig, r *pipelines.Resources) error {
	if env.Ops == nil {
		return nil
	}
	if env.DB == nil {
		return errors.New("modules API needs PostgreSQL: set DATABASE_URL")
	}
	cl, err := kgo.NewClient(ProducerOpts(env.Kafka)...)
	if err != nil {
		return fmt.Errorf("modules API: kafka client: %w", err)
	}
	r.Add(cl.Close)
	asm, err := NewAssembler(env.DB, cl, env.Registerer, cfg)
	if err != nil {
		return err
	}
	for pattern, h := range asm.Routes() {
		env.Ops.Handle(pattern, h)
	}
	return nil
}
