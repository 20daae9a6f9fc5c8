package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/modules"
)

// sluiceInputs is what variant (ii) gives the sluice services: the Kafka
// options, a pool on the bench database (every migration applied), the
// run's own topics (refresh and state co-partitioned, --partitions each),
// the group-name prefix, the synthetic upstream the seed variant calls
// (at most 12 calls at once, counted) and a registry.
type sluiceInputs struct {
	kafka        []kgo.Opt
	db           *pgxpool.Pool
	refreshTopic string
	stateTopic   string
	dlqTopic     string
	groupPrefix  string
	source       modules.ModuleSource
	reg          prometheus.Registerer
}

// sluiceDriver produces the workload to the refresh topic and waits until
// the ready clock saw every key become ready.
type sluiceDriver struct {
	cl    *kgo.Client
	db    *pgxpool.Pool
	topic string
	keys  int
	clock *readyClock
}

// run produces arrivals at their due times (keyed TICKER:module, reason
// bench) and waits for their acks; request latency runs from the due time
// to the ack (what POST /api/v1/modules/refresh answers after). It then
// waits until all keys are fresh or timeout has passed since the start.
func (d *sluiceDriver) run(ctx context.Context, arrivals []arrival, timeout time.Duration) (result, error) {
	start := time.Now()
	lat := make([]time.Duration, len(arrivals))
	var failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for i, a := range arrivals {
		due := start.Add(a.at)
		if w := time.Until(due); w > 0 {
			select {
			case <-time.After(w):
			case <-ctx.Done():
				return result{}, ctx.Err()
			}
		}
		ticker := benchTicker(a.key)
		v, err := json.Marshal(modules.RefreshRequest{Ticker: ticker, Module: benchModule, Reason: "bench",
			RequestedAt: time.Now().UTC(), RequestID: uuid.NewString()})
		if err != nil {
			return result{}, err
		}
		wg.Add(1)
		d.cl.Produce(ctx, &kgo.Record{Topic: d.topic, Key: []byte(modules.Key(ticker, benchModule)), Value: v},
			func(_ *kgo.Record, err error) {
				defer wg.Done()
				lat[i] = time.Since(due)
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
			})
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, fmt.Errorf("produce: %d requests failed: %w", failed.Load(), firstErr)
	}
	fresh, allFresh, polls, err := d.waitFresh(ctx, start, timeout)
	if err != nil {
		return result{}, err
	}
	return result{requests: len(arrivals), freshKeys: fresh, allFresh: allFresh, elapsed: time.Since(start), start: start,
		p50: percentile(lat, 0.50), p99: percentile(lat, 0.99), polls: polls}, nil
}

// waitFresh waits until the ready clock saw every key's first ready write
// (or timeout after start passed), then checks the view once: it returns
// how many keys the view shows fresh, when (since start) the last key's
// first ready write committed, and the bench's transactions (the clock's
// LISTEN and the check).
func (d *sluiceDriver) waitFresh(ctx context.Context, start time.Time, timeout time.Duration) (int, time.Duration, int64, error) {
	_, last, err := d.clock.wait(ctx, d.keys, start.Add(timeout))
	if err != nil {
		return 0, 0, listenCommits, err
	}
	tickers := make([]string, d.keys)
	for k := range d.keys {
		tickers[k] = benchTicker(k)
	}
	var n int
	if err := d.db.QueryRow(ctx, `SELECT count(*) FROM ticker_modules_status
WHERE module_id = $1 AND ticker = ANY($2::text[]) AND freshness_status = 'fresh'`, benchModule, tickers).Scan(&n); err != nil {
		return 0, 0, listenCommits + 1, fmt.Errorf("check ticker_modules_status: %w", err)
	}
	return n, last.Sub(start), listenCommits + 1, nil
}
