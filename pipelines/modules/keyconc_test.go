package modules

import (
	"context"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
)

// blockingSource holds the calls of one ticker until release is closed.
type blockingSource struct {
	ModuleSource
	ticker  string
	entered chan struct{} // closed when the first held call started
	once    sync.Once
	release chan struct{}
}

func (s *blockingSource) Fetch(ctx context.Context, ticker, module string) (Snapshot, error) {
	if ticker == s.ticker {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		}
	}
	return s.ModuleSource.Fetch(ctx, ticker, module)
}

// Within one partition, a key whose upstream call hangs holds up neither
// the refresh of another key queued behind it nor that key's row: FAST's
// row turns ready in ticker_data_modules while SLOW's call, produced
// first, is still running; SLOW's turns ready once its call returns. Each
// costs one call.
func TestRefreshKeysOfOnePartitionRunConcurrently(t *testing.T) {
	t.Parallel()
	var src *blockingSource
	f := newSvcFixture(t, []testkit.Option{testkit.FakeOK()}, func(c *Config) {
		src = &blockingSource{ModuleSource: c.Source, ticker: "SLOW", entered: make(chan struct{}), release: make(chan struct{})}
		c.Source = src
	})
	f.cfg.RefreshTopic = f.k.Topic(t, "modules.refresh.one", 1)
	f.cfg.StateTopic = f.k.Topic(t, "modules.state.one", 1, map[string]*string{"cleanup.policy": ptr("compact")})
	f.produce(t,
		&kgo.Record{Key: []byte("SLOW:options_flow"), Value: request("SLOW", ModuleOptionsFlow)},
		&kgo.Record{Key: []byte("FAST:options_flow"), Value: request("FAST", ModuleOptionsFlow)})
	m := f.start(t)
	defer m.stop()
	<-src.entered
	f.waitRow(t, "FAST", ModuleOptionsFlow, "FAST ready while SLOW's call runs", func(r row) bool { return r.status == "ready" })
	if r, ok := f.row(t, "SLOW", ModuleOptionsFlow); ok && r.status != "refreshing" {
		t.Errorf("SLOW's row is %s while its call runs, want refreshing", r.status)
	}
	close(src.release)
	f.waitRow(t, "SLOW", ModuleOptionsFlow, "SLOW ready", func(r row) bool { return r.status == "ready" })
	for _, key := range []string{"SLOW:options_flow", "FAST:options_flow"} {
		if c := f.src.Calls(key); c != 1 {
			t.Errorf("%s: %d upstream calls, want 1", key, c)
		}
	}
}
