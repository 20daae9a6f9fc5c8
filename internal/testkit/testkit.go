package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultTimeout bounds the context returned by Context.
const DefaultTimeout = 2 * time.Minute

// maxNameLen is the longest name Name returns: PostgreSQL truncates
// identifiers at 63 bytes, and Kafka topic names must stay under 249.
const maxNameLen = 63

// Name returns a unique name for this test that is safe as a Kafka topic,
// consumer group, SQL identifier (unquoted) and Redis/S3 key segment: the
// sanitized prefix, the sanitized t.Name() and 12 random hex digits (48
// bits: 10 000 names collide with a chance of about 2 in 10 million), joined
// by "_". Sanitizing lowercases and turns every run of characters outside
// [a-z0-9] into one "_". The result matches ^[a-z][a-z0-9_]{0,62}$; the
// test name is truncated to fit, the random suffix never is.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	suffix := fmt.Sprintf("%012x", rand.Uint64()&(1<<48-1))
	head := sanitize(prefix)
	if n := sanitize(t.Name()); n != "" {
		if head != "" {
			head += "_"
		}
		head += n
	}
	if head == "" || head[0] < 'a' || head[0] > 'z' {
		head = strings.TrimSuffix("t_"+head, "_")
	}
	if budget := maxNameLen - len(suffix) - 1; len(head) > budget {
		head = strings.TrimRight(head[:budget], "_")
	}
	return head + "_" + suffix
}

// sanitize lowercases s, replaces each run of characters outside [a-z0-9]
// with a single "_" and trims "_" from both ends.
func sanitize(s string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			under = false
			continue
		}
		if !under {
			b.WriteByte('_')
			under = true
		}
	}
	return strings.Trim(b.String(), "_")
}

// Option adjusts how a constructor chooses and configures its service.
type Option func(*options)

type options struct {
	fakeOK    bool
	forceFake bool
	redisDB   int
	redisDBOK bool
	kfakeOpts []kfake.Opt
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// FakeOK allows an in-process fake (kfake for Kafka, miniredis for Redis, a
// local directory for the object store) when no real service is available.
// Real services are still preferred. It has no effect on NewPostgres, which
// has no fake.
func FakeOK() Option { return func(o *options) { o.fakeOK = true } }

// ForceFake makes NewKafka always start an in-process kfake cluster, even
// when KAFKA_BROKERS is set or Docker answers. Use it for tests that drive
// faults through Kafka.Fake's control hooks; everything else should prefer
// real brokers.
func ForceFake() Option { return func(o *options) { o.fakeOK, o.forceFake = true, true } }

// WithKfakeOpts adds options to the kfake cluster when NewKafka starts one
// (ignored for real brokers), e.g. kfake.AllowAutoTopicCreation() or
// kfake.SeedTopics.
func WithKfakeOpts(opts ...kfake.Opt) Option {
	return func(o *options) { o.kfakeOpts = append(o.kfakeOpts, opts...) }
}

// WithRedisDB selects the logical Redis database n (smap uses DB 1). Without
// it NewRedis uses the database named in REDIS_URL, or 0.
func WithRedisDB(n int) Option { return func(o *options) { o.redisDB, o.redisDBOK = n, true } }

// Context returns a context that is cancelled when t's cleanup runs, after
// DefaultTimeout, or shortly before t's own deadline (go test -timeout),
// whichever comes first. Unlike t.Context it is still live inside cleanup
// functions registered after the call.
func Context(t testing.TB) context.Context {
	t.Helper()
	return ContextTimeout(t, DefaultTimeout)
}

// ContextTimeout is Context with a timeout of d instead of DefaultTimeout.
func ContextTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := dt.Deadline(); ok {
			// Leave a few seconds so the test fails with a context error
			// and its cleanups run, rather than being killed by the timeout.
			grace := min(5*time.Second, time.Until(dl)/10)
			var cancel2 context.CancelFunc
			ctx, cancel2 = context.WithDeadline(ctx, dl.Add(-grace))
			t.Cleanup(cancel2)
		}
	}
	return ctx
}

// cleanupContext returns a fresh context for work done inside a cleanup
// function, when the test's own contexts may already be cancelled.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// Service is implemented by *Kafka, *Postgres, *PostgresServer, *Redis and
// *ObjectStore.
type Service interface {
	// IsReal reports whether the service is a real server rather than an
	// in-process fake or a local directory.
	IsReal() bool
	// String names the service and where it came from; it never contains
	// credentials.
	String() string
}

// RequireReal skips the test (fails it under CI=true) unless every svc is
// real. Use it in integration tests that would prove nothing on a fake.
func RequireReal(t testing.TB, svcs ...Service) {
	t.Helper()
	for _, s := range svcs {
		if !s.IsReal() {
			unavailable(t, "%s is not a real service and this test needs one", s)
		}
	}
}

// inCI reports whether CI is set to a true value.
func inCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// unavailable skips t with the message, or fails it under CI=true.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := "testkit: " + fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatalf("%s (CI=true, so this fails instead of skipping)", msg)
	}
	t.Skip(msg)
}

// dockerCheckTimeout bounds the Docker engine health check.
const dockerCheckTimeout = 3 * time.Second

// dockerEngine reports nil when a Docker engine answers testcontainers'
// health check, else why not. It never panics: testcontainers panics when
// it cannot find a Docker host, so the check runs under recover, in a
// goroutine that is abandoned if it outlives dockerCheckTimeout.
func dockerEngine(t testing.TB) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dockerCheckTimeout)
	defer cancel()
	logger := newTCLogger(t)
	res := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("testcontainers: %v", r)
			}
			res <- err
		}()
		var p *testcontainers.DockerProvider
		p, err = testcontainers.NewDockerProvider(testcontainers.WithLogger(logger))
		if err != nil {
			return
		}
		err = p.Health(ctx) // Health closes the provider
	}()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("no Docker engine (%w)", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no Docker engine (health check: %w)", ctx.Err())
	}
}

// tcLogger sends testcontainers' logs to the test log until the test's
// cleanup starts, then drops them (t.Logf panics after a test completes).
type tcLogger struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func newTCLogger(t testing.TB) *tcLogger {
	l := &tcLogger{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

// Printf implements testcontainers' log.Logger.
func (l *tcLogger) Printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Logf("testcontainers: "+format, v...)
	}
}

// reasons accumulates why each source of a service was not used.
type reasons []string

func (r *reasons) add(format string, args ...any) { *r = append(*r, fmt.Sprintf(format, args...)) }

func (r reasons) String() string { return strings.Join(r, ", ") }
