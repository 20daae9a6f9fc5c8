package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
)

// DemoOptions configures DemoScenario. Zero fields take the defaults
// documented on them.
type DemoOptions struct {
	// Ticker (default "DEMO" and the current Unix time in seconds, base
	// 36: a key no earlier run has refreshed, so that the stampede costs
	// exactly one upstream call on a long-lived stack too).
	Ticker string
	// Module of the stampede (default options_flow).
	Module string
	// Requests is the number of refresh requests of the stampede, all
	// produced at once by as many goroutines (default 50).
	Requests int
	// Metrics is the registry the running modules services register on
	// (sluice_modules_requests_total and sluice_modules_upstream_calls_total
	// are read from it). Default: env.Registerer when it is a Gatherer.
	Metrics prometheus.Gatherer
	// Poll is the polling period of the waits (default 100ms).
	Poll time.Duration
}

// DemoResult is what DemoScenario did and saw.
type DemoResult struct {
	Ticker, Module, Key string
	// Requests is the number of refresh requests produced, SendTook how
	// long producing them took (they all were in flight at once).
	Requests int
	SendTook time.Duration
	// Outcomes are the requests handled per outcome (fetched,
	// skipped_fresh, …) and UpstreamCalls the upstream calls of the
	// module, both counted by the services' metrics during the stampede.
	Outcomes      map[string]int64
	UpstreamCalls int64
	// State is the key's row of ticker_modules_status once ready.
	State ModuleView
	// Assembly is the assemble answer of the ticker (every enabled
	// module) right after; Job, when the assemble created one, is that
	// job once its refreshes ended (status done or failed).
	Assembly Assembly
	Job      *Job
}

// DemoScenario shows one owner per key and the assemble: it produces
// o.Requests refresh requests of one key to the refresh topic at once (a
// stampede), waits until the services handled them all and the key is
// ready in ticker_data_modules, reads how many upstream calls they cost
// (one: the first request fetches, the others find the state fresh), then
// assembles the ticker: the module is served, the others are missing and
// an analysis job is created whose refreshes it then waits for. The modules
// services (Services) must be running against env's Kafka and PostgreSQL,
// and register their metrics on o.Metrics. cfg names the refresh topic
// (default modules.refresh) and the assemble budget.
func DemoScenario(ctx context.Context, env pipelines.Env, cfg Config, o DemoOptions) (DemoResult, error) {
	cfg = cfg.named(Declare(Config{}), true)
	if o.Ticker == "" {
		o.Ticker = "DEMO" + strings.ToUpper(strconv.FormatInt(time.Now().Unix(), 36))
	}
	if o.Module == "" {
		o.Module = ModuleOptionsFlow
	}
	if o.Requests <= 0 {
		o.Requests = 50
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Metrics == nil {
		g, ok := env.Registerer.(prometheus.Gatherer)
		if !ok {
			return DemoResult{}, errors.New("modules demo: no metrics to read (DemoOptions.Metrics)")
		}
		o.Metrics = g
	}
	if env.DB == nil {
		return DemoResult{}, errors.New("modules demo needs PostgreSQL")
	}
	ticker, err := CheckTicker(o.Ticker)
	if err != nil {
		return DemoResult{}, fmt.Errorf("modules demo: %w", err)
	}
	if err := CheckModule(o.Module); err != nil {
		return DemoResult{}, fmt.Errorf("modules demo: %w", err)
	}
	res := DemoResult{Ticker: ticker, Module: o.Module, Key: Key(ticker, o.Module), Requests: o.Requests}

	cl, err := kgo.NewClient(env.Kafka...)
	if err != nil {
		return res, fmt.Errorf("modules demo: kafka producer: %w", err)
	}
	defer cl.Close()
	asm, err := NewAssembler(env.DB, cl, env.Registerer, AssembleConfig{RefreshTopic: cfg.RefreshTopic, Budget: cfg.AssembleBudget})
	if err != nil {
		return res, err
	}
	counts := func() (map[string]int64, int64, error) {
		outcomes, err := counterBy(o.Metrics, "sluice_modules_requests_total", "module", o.Module, "outcome")
		if err != nil {
			return nil, 0, err
		}
		calls, err := counterBy(o.Metrics, "sluice_modules_upstream_calls_total", "module", o.Module, "result")
		if err != nil {
			return nil, 0, err
		}
		return outcomes, sum(calls), nil
	}
	outcomes0, calls0, err := counts()
	if err != nil {
		return res, err
	}

	// The stampede: every request in flight at once, keyed TICKER:module
	// (one partition, one owner).
	start := time.Now()
	errs := make([]error, o.Requests)
	var wg sync.WaitGroup
	for i := range o.Requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := json.Marshal(RefreshRequest{Ticker: ticker, Module: o.Module, Reason: "demo",
				RequestedAt: time.Now().UTC(), RequestID: fmt.Sprintf("demo-%d-%d", start.UnixNano(), i)})
			if err == nil {
				err = cl.ProduceSync(ctx, &kgo.Record{Topic: cfg.RefreshTopic, Key: []byte(res.Key), Value: v}).FirstErr()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	res.SendTook = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("modules demo: produce to %s: %w", cfg.RefreshTopic, err)
	}

	// Every request handled, and the key ready in ticker_data_modules.
	err = poll(ctx, o.Poll, func() (bool, error) {
		outcomes, calls, err := counts()
		if err != nil {
			return false, err
		}
		res.Outcomes, res.UpstreamCalls = map[string]int64{}, calls-calls0
		var handled int64
		for k, n := range outcomes {
			if d := n - outcomes0[k]; d > 0 {
				res.Outcomes[k] = d
				handled += d
			}
		}
		if handled < int64(o.Requests) {
			return false, nil
		}
		st, err := asm.Status(ctx, ticker, o.Module)
		if err != nil {
			return false, err
		}
		res.State = st.Modules[0]
		return res.State.Status == string(StatusReady), nil
	})
	if err != nil {
		return res, fmt.Errorf("modules demo: %s not handled and ready (%d requests handled, state %q): %w",
			res.Key, sum(res.Outcomes), res.State.Status, err)
	}

	if res.Assembly, err = asm.Assemble(ctx, AssembleRequest{Ticker: ticker}); err != nil {
		return res, fmt.Errorf("modules demo: assemble %s: %w", ticker, err)
	}
	if j := res.Assembly.Job; j != nil && j.RefreshError == "" {
		var job Job
		err := poll(ctx, o.Poll, func() (bool, error) {
			var err error
			job, err = asm.Job(ctx, j.JobID)
			return err == nil && job.Status != "pending", err
		})
		if err != nil {
			return res, fmt.Errorf("modules demo: job %s still %q: %w", j.JobID, job.Status, err)
		}
		res.Job = &job
	}
	return res, nil
}

// Served returns the modules the assembly served data for.
func (a Assembly) Served() []string {
	var out []string
	for _, v := range a.Modules {
		if v.Served {
			out = append(out, v.Module)
		}
	}
	return out
}

// poll calls cond every period until it is done, fails, or ctx ends.
func poll(ctx context.Context, period time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		done, err := cond()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// counterBy sums the counter name of g over the series whose label where
// has the value is, per value of the label by.
func counterBy(g prometheus.Gatherer, name, where, is, by string) (map[string]int64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("modules demo: gather metrics: %w", err)
	}
	out := map[string]int64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var match bool
			var key string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case where:
					match = lp.GetValue() == is
				case by:
					key = lp.GetValue()
				}
			}
			if match {
				out[key] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out, nil
}
