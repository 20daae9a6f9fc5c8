package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/topics"
)

// modulesModule is the module every key of the workload refreshes.
const modulesModule = "options_flow"

// modulesLoad is modules' part of a scenario: keys (TICKER:options_flow)
// of fresh tickers, each requested modulesCopies times at
// once, so that the gate has duplicates to skip; the synthetic upstream
// answers after 200 ms, behind a limiter of 20 calls a second
// (MODULES_RATE_LIMIT, the scenario's own: the limiter's windows are
// shared by every member and every run). What the input implies: every
// key ready in ticker_data_modules at the greatest fencing token its
// state changelog holds (no stale overwrite, no regression), at most one
// upstream call per key plus one per takeover (a refresh a killed owner
// left unfinished), and no dead letter.
type modulesLoad struct {
	keys      []string // tickers
	calls     float64  // upstream calls of the members, scraped before each was stopped or killed
	takeovers float64
}

const modulesCopies = 3

func newModulesLoad(cfg *config) *modulesLoad {
	return &modulesLoad{keys: make([]string, max(1, int(150*cfg.scale)))}
}

func (l *modulesLoad) pipeline() string { return "modules" }
func (l *modulesLoad) sent() int        { return len(l.keys) * modulesCopies }
func (l *modulesLoad) unit() string     { return "keys" }

func (l *modulesLoad) groups() map[string][]string {
	return map[string][]string{"modules-refresh": {topics.ModulesRefresh}, "modules-mirror": {topics.ModulesState}}
}

// memberEnv is the members' synthetic upstream latency and limiter.
func (l *modulesLoad) memberEnv(sc *scene) []string {
	return []string{"MODULES_SYNTHETIC_LATENCY=200ms", "MODULES_RATE_LIMIT=1m:1200,1s:20"}
}

// beforeStop keeps the upstream calls and takeovers of a member about to
// be stopped or killed (a call between this scrape and a kill goes
// uncounted).
func (l *modulesLoad) beforeStop(m *member) {
	if v, err := faults.ScrapeSum(m.metrics, "sluice_modules_upstream_calls_total", `result="ok"`); err == nil {
		l.calls += v
	}
	if v, err := faults.ScrapeSum(m.metrics, "sluice_modules_takeovers_total", ""); err == nil {
		l.takeovers += v
	}
}

func (l *modulesLoad) setup(ctx context.Context, sc *scene) error {
	for i := range l.keys {
		// At most 10 characters (rule modules.ticker); the schema is the
		// scenario's own, so the tickers need not differ between scenarios.
		l.keys[i] = fmt.Sprintf("CH%04d", i)
	}
	var recs []*kgo.Record
	for range modulesCopies {
		for _, t := range l.keys {
			b, err := json.Marshal(modules.RefreshRequest{Ticker: t, Module: modulesModule, Reason: "chaos",
				RequestedAt: time.Now().UTC(), RequestID: uuid.NewString()})
			if err != nil {
				return err
			}
			recs = append(recs, &kgo.Record{Topic: sc.topic(topics.ModulesRefresh), Key: []byte(modules.Key(t, modulesModule)), Value: b})
		}
	}
	return sc.cl.ProduceSync(ctx, recs...).FirstErr()
}

// progress is the keys ready in ticker_data_modules.
func (l *modulesLoad) progress(ctx context.Context, sc *scene) (done, want int64, err error) {
	err = sc.db.QueryRow(ctx, `SELECT count(*) FROM ticker_data_modules WHERE module_id = $1 AND status = 'ready'`, modulesModule).Scan(&done)
	return done, int64(len(l.keys)), err
}

func (l *modulesLoad) verify(ctx context.Context, sc *scene, r *result) error {
	// The latest state of every key: the greatest token in the changelog.
	latest := map[string]modules.State{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.ModulesState), func(rec *kgo.Record) {
		if rec.Value == nil {
			return
		}
		st, err := modules.DecodeState(rec.Key, rec.Value)
		if err != nil {
			r.note("undecodable state %s: %v", rec.Key, err)
			return
		}
		k := string(rec.Key)
		if old, ok := latest[k]; !ok || st.Epoch > old.Epoch || (st.Epoch == old.Epoch && st.Version > old.Version) {
			latest[k] = st
		}
	}); err != nil {
		return err
	}
	ready := effect{kind: "keys ready", want: int64(len(l.keys))}
	current := effect{kind: "rows at the latest state", want: int64(len(l.keys))}
	want := map[string]bool{}
	for _, t := range l.keys {
		want[modules.Key(t, modulesModule)] = true
	}
	rows, err := sc.db.Query(ctx, `SELECT ticker::text, module_id, status, state_epoch, state_version FROM ticker_data_modules`)
	if err != nil {
		return fmt.Errorf("ticker_data_modules: %w", err)
	}
	seen := map[string]bool{}
	for rows.Next() {
		var ticker, module, status string
		var epoch int32
		var version int64
		if err := rows.Scan(&ticker, &module, &status, &epoch, &version); err != nil {
			rows.Close()
			return err
		}
		k := modules.Key(ticker, module)
		if !want[k] {
			ready.dup++
			continue
		}
		seen[k] = true
		if status == string(modules.StatusReady) {
			ready.got++
		} else {
			ready.lost++
			r.note("%s: status %s", k, status)
		}
		st, ok := latest[k]
		switch {
		case !ok:
			current.lost++
			r.note("%s: a row, but no state in the changelog", k)
		case epoch != st.Epoch || version != st.Version || status != string(st.Status):
			current.lost++
			r.note("%s: row at (%d, %d) %s, latest state (%d, %d) %s", k, epoch, version, status, st.Epoch, st.Version, st.Status)
		default:
			current.got++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for k := range want {
		if !seen[k] {
			ready.lost++
			current.lost++
		}
	}
	r.add(ready)
	r.add(current)

	// At most one call per key, plus one per refresh taken over from a
	// killed owner.
	calls := effect{kind: "upstream calls", got: int64(l.calls), want: int64(len(l.keys)) + int64(l.takeovers), atMost: true}
	calls.dup = max(0, calls.got-calls.want)
	if l.takeovers > 0 {
		r.note("%g refreshes taken over from the killed member (each may call the upstream once more)", l.takeovers)
	}
	r.add(calls)

	dl := effect{kind: "dead letters"}
	records, distinct, err := faults.DLQCoordinates(ctx, sc.adm, sc.kopts, sc.topic(topics.ModulesDLQ))
	if err != nil {
		return err
	}
	dl.got, dl.dup = int64(records), int64(records-distinct)
	r.add(dl)
	return nil
}
