package ticks_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/pipelines/ticks"
)

// lockedBuffer collects log output from concurrent goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWorkerLogsPipelineOnce: every log line of a worker, the runtime's
// included, names the pipeline exactly once (a JSON line with the key
// twice is ambiguous to log processors).
func TestWorkerLogsPipelineOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, ticks.SyntheticConfig{}, nil)
	var out lockedBuffer
	f.env.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stop := f.startWorker(t)
	stop()

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var fromRuntime int
	for _, line := range lines {
		if n := strings.Count(line, `"pipeline":`); n != 1 {
			t.Errorf("%d pipeline attributes in %s", n, line)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "pipeline starting" {
			fromRuntime++
			if rec["pipeline"] != "ticks" {
				t.Errorf("pipeline = %v in %s, want ticks", rec["pipeline"], line)
			}
		}
	}
	if fromRuntime != 1 {
		t.Errorf("%d 'pipeline starting' lines, want 1; log:\n%s", fromRuntime, out.String())
	}
}
