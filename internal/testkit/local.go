package testkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/localsvc"
)

// localStartTimeout bounds starting a local server, initdb included.
const localStartTimeout = 2 * time.Minute

// localServer is a server started through internal/localsvc.
type localServer interface {
	Stop() error
	Output() string
}

// startLocal starts a local server with start and stops it on t's cleanup,
// logging the tail of its output first when the test failed.
func startLocal[S localServer](t testing.TB, name string, start func(ctx context.Context) (S, error)) (S, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), localStartTimeout)
	defer cancel()
	s, err := start(ctx)
	if err != nil {
		return s, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testkit: %s output (tail):\n%s", name, s.Output())
		}
		if err := s.Stop(); err != nil {
			t.Logf("testkit: stop %s: %v", name, err)
		}
	})
	return s, nil
}

// addLocal records why the local service what (started with localsvc,
// err its error) is not used: its binaries are missing (err wraps
// localsvc.ErrNotFound), or it failed, its error logged on t in full.
func (r *reasons) addLocal(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, localsvc.ErrNotFound) {
		r.add("%v", err)
		return
	}
	t.Logf("testkit: local %s failed: %v", what, err)
	r.add("local %s failed (see log)", what)
}
