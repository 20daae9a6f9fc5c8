package ticks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// clientCounter counts the Kafka clients built with its hooks and the ones
// closed.
type clientCounter struct{ opened, closed atomic.Int32 }

func (c *clientCounter) OnNewClient(*kgo.Client)    { c.opened.Add(1) }
func (c *clientCounter) OnClientClosed(*kgo.Client) { c.closed.Add(1) }

// refuseSecond registers on its Registerer, except that it refuses the
// second registration of a collector describing the metric name.
type refuseSecond struct {
	prometheus.Registerer
	name string
	mu   sync.Mutex
	seen int
}

func (r *refuseSecond) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	match := false
	for d := range ch {
		match = match || strings.Contains(d.String(), fmt.Sprintf("fqName: %q", r.name))
	}
	if match {
		r.mu.Lock()
		r.seen++
		n := r.seen
		r.mu.Unlock()
		if n == 2 {
			return errors.New("registration of " + r.name + " refused")
		}
	}
	return r.Registerer.Register(c)
}

// When a step of Services after NewWorker fails — the coordinator's client
// (Kafka options only it validates), the supervisor's store metrics, or
// mounting the routes on the ops server (a panic) — every Kafka client
// Services had built (the worker's producer, the coordinator's client) is
// closed: none of them would ever be run, so nothing else closes them, and
// each holds goroutines and broker connections.
func TestServicesClosesClientsWhenALaterStepFails(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := ticks.Config{
		RateLimit:  ticks.RateLimitConfig{Disabled: true},
		Supervisor: ticks.SupervisorConfig{Enabled: true},
	}
	cases := []struct {
		name string
		// setup changes the environment so that a step after NewWorker fails.
		setup     func(t *testing.T, env *pipelines.Env)
		wantErr   string // the error Services returns, or
		wantPanic string // the panic it lets through
		minOpened int32  // clients built before the failing step
	}{
		{
			name: "coordinator client refuses the Kafka options",
			// The worker's producer sets its own linger (0) after env.Kafka;
			// the coordinator's client takes env.Kafka as it is.
			setup: func(_ *testing.T, env *pipelines.Env) {
				env.Kafka = append(env.Kafka, kgo.ProducerLinger(2*time.Minute))
			},
			wantErr:   "coordinator client",
			minOpened: 1,
		},
		{
			name: "supervisor store metrics refused",
			setup: func(_ *testing.T, env *pipelines.Env) {
				env.Registerer = &refuseSecond{Registerer: prometheus.NewRegistry(), name: "sluice_objstore_operations_total"}
			},
			wantErr:   "registration of sluice_objstore_operations_total refused",
			minOpened: 1,
		},
		{
			name: "routes already mounted on the ops server",
			setup: func(t *testing.T, env *pipelines.Env) {
				reg := prometheus.NewRegistry()
				env.Ops = opshttp.New(reg, env.Logger)
				first := *env
				first.Kafka = env.Kafka[:len(env.Kafka)-1] // without the counting hooks
				first.Registerer = reg
				svcs, err := ticks.Services(first, cfg)
				if err != nil {
					t.Fatal(err)
				}
				// Run with a cancelled context: the services return at once,
				// and the last one closes their clients.
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				for _, s := range svcs {
					_ = s.Run(ctx)
				}
			},
			wantPanic: "conflicts",
			minOpened: 2,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cc := &clientCounter{}
			env := pipelines.Env{
				Kafka:      append(k.Opts(t), kgo.WithHooks(cc)),
				Objects:    store,
				Registerer: prometheus.NewRegistry(),
				Logger:     testLogger(t),
			}
			c.setup(t, &env)
			var (
				svcs []pipelines.Service
				err  error
				pan  any
			)
			func() {
				defer func() { pan = recover() }()
				svcs, err = ticks.Services(env, cfg)
			}()
			switch {
			case c.wantPanic != "":
				if pan == nil || !strings.Contains(fmt.Sprint(pan), c.wantPanic) {
					t.Fatalf("Services: panic %v, error %v, services %v; want a panic with %q", pan, err, svcs, c.wantPanic)
				}
			case pan != nil:
				t.Fatalf("Services panicked: %v", pan)
			case err == nil || !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("Services: error %v, services %v; want an error with %q", err, svcs, c.wantErr)
			}
			opened, closed := cc.opened.Load(), cc.closed.Load()
			if opened < c.minOpened {
				t.Fatalf("%d Kafka clients built before the failure, want at least %d (the test no longer reaches the failing step)", opened, c.minOpened)
			}
			if closed != opened {
				t.Errorf("%d of the %d Kafka clients Services built were closed after it failed", closed, opened)
			}
		})
	}
}
