package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
)

// FlagScrapeSlow is the control flag the backlog monitor maintains.
const FlagScrapeSlow = "SCRAPE_SLOW"

// FlagValue is the JSON value of a control.flags record.
type FlagValue struct {
	Value     bool      `json:"value"`
	Lag       int64     `json:"lag"`
	UpdatedAt time.Time `json:"updated_at"`
}

// BacklogConfig configures a BacklogMonitor.
type BacklogConfig struct {
	Group, Topic, FlagsTopic string
	// Threshold: lag > Threshold ⇒ SCRAPE_SLOW = true.
	Threshold int64
	// Interval between checks (default 5 s).
	Interval time.Duration
	// Refresh republishes an unchanged flag this often so that readers see
	// a recent updated_at (default 1 min).
	Refresh time.Duration
}

// BacklogMonitor replaces the seed's "task_q > 10k" check: it measures the
// consumer lag of the silver group on the bronze topic every Interval and
// publishes SCRAPE_SLOW to control.flags (key SCRAPE_SLOW, value FlagValue)
// and mirrors it into Postgres control_flags, when the value changes and
// every Refresh. Several monitors (one per silver process) may run; they
// compute the same value from the same offsets, so their writes agree.
type BacklogMonitor struct {
	cfg   BacklogConfig
	kopts []kgo.Opt
	db    *pgxpool.Pool
	log   *slog.Logger
	ready atomic.Bool

	lag  prometheus.Gauge
	flag prometheus.Gauge
}

// NewBacklogMonitor builds a monitor; it needs env.Kafka and env.DB.
func NewBacklogMonitor(env pipelines.Env, cfg BacklogConfig) (*BacklogMonitor, error) {
	if cfg.Group == "" || cfg.Topic == "" || cfg.FlagsTopic == "" {
		return nil, errors.New("backlog monitor: group, topic and flags topic are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Minute
	}
	m := &BacklogMonitor{cfg: cfg, kopts: env.Kafka, db: env.DB, log: env.Logger}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.lag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_silver_backlog_records", Help: "Consumer lag of the silver group on the bronze topic."})
	m.flag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_silver_scrape_slow", Help: "1 while SCRAPE_SLOW is set."})
	if env.Registerer != nil {
		for _, c := range []prometheus.Collector{m.lag, m.flag} {
			if err := env.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("backlog monitor metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Name implements pipelines.Service.
func (m *BacklogMonitor) Name() string { return "silver-backlog" }

// Ready reports whether the last check succeeded.
func (m *BacklogMonitor) Ready() bool { return m.ready.Load() }

// Run checks the backlog every Interval until ctx is done.
func (m *BacklogMonitor) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(m.kopts...)
	if err != nil {
		return fmt.Errorf("backlog monitor: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last *bool
	var lastPub time.Time
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		lag, err := m.Lag(ctx, adm)
		if err == nil {
			slow := lag > m.cfg.Threshold
			m.lag.Set(float64(lag))
			if slow {
				m.flag.Set(1)
			} else {
				m.flag.Set(0)
			}
			if last == nil || *last != slow || time.Since(lastPub) >= m.cfg.Refresh {
				if err = m.Publish(ctx, cl, FlagValue{Value: slow, Lag: lag, UpdatedAt: time.Now().UTC()}); err == nil {
					if last == nil || *last != slow {
						m.log.Info("SCRAPE_SLOW changed", "value", slow, "lag", lag, "threshold", m.cfg.Threshold)
					}
					last, lastPub = &slow, time.Now()
				}
			}
		}
		m.ready.Store(err == nil)
		if err != nil && ctx.Err() == nil {
			m.log.Warn("backlog check failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Lag returns the records of Topic not yet committed by Group (all records
// when the group has committed nothing). kadm's group lag only covers
// partitions a group committed or is assigned, so a group that has not
// started yet would show no backlog; hence the explicit computation.
func (m *BacklogMonitor) Lag(ctx context.Context, adm *kadm.Client) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, m.cfg.Topic)
	if err != nil {
		return 0, fmt.Errorf("end offsets of %s: %w", m.cfg.Topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, m.cfg.Topic)
	if err != nil {
		return 0, fmt.Errorf("start offsets of %s: %w", m.cfg.Topic, err)
	}
	// A group that never committed has no offsets: real Kafka answers with
	// none, some brokers (kfake) with GROUP_ID_NOT_FOUND.
	// Either way its lag is the whole retained log.
	committed, err := adm.FetchOffsets(ctx, m.cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return 0, fmt.Errorf("offsets of group %s: %w", m.cfg.Group, err)
	}
	var total int64
	var ferr error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			ferr = e.Err
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At >= from {
			from = c.At
		}
		if e.Offset > from {
			total += e.Offset - from
		}
	})
	if ferr != nil {
		return 0, fmt.Errorf("offsets of %s: %w", m.cfg.Topic, ferr)
	}
	return total, nil
}

// Publish writes the flag to the flags topic and to control_flags. The two
// writes are independent, each with its own time budget: a missing flags
// topic or an unreachable broker must not keep the flag from PostgreSQL
// readers, nor PostgreSQL being down keep it from the topic's. The error
// joins the failures of both. In control_flags a value older than the one
// stored (by updated_at) is ignored, so with several processes a delayed
// write cannot replace a newer measurement; the topic keeps every value and
// its latest is the latest produced.
func (m *BacklogMonitor) Publish(ctx context.Context, cl *kgo.Client, v FlagValue) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", FlagScrapeSlow, err)
	}
	var kafkaErr, dbErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: m.cfg.FlagsTopic, Key: []byte(FlagScrapeSlow), Value: body}).FirstErr(); err != nil {
			kafkaErr = fmt.Errorf("publish %s to %s: %w", FlagScrapeSlow, m.cfg.FlagsTopic, err)
		}
	})
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := m.db.Exec(dctx, `INSERT INTO control_flags (name, value, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at
		WHERE control_flags.updated_at <= EXCLUDED.updated_at`,
		FlagScrapeSlow, v.Value, v.UpdatedAt); err != nil {
		dbErr = fmt.Errorf("mirror %s into control_flags: %w", FlagScrapeSlow, err)
	}
	wg.Wait()
	return errors.Join(kafkaErr, dbErr)
}
