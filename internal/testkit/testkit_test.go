package testkit

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

func TestName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		test, prefix string
		wantHead     string // expected name without the random suffix
	}{
		{"plain", "orders", "orders_testname_plain"},
		{"Mixed Case/and:punct-uation é", "Silver.Topic", "silver_topic_testname_mixed_case_and_punct_uation"},
		{"no prefix", "", "testname_no_prefix"},
		{"__edges__", "__", "testname_edges"},
		{"digits", "9lives", "t_9lives_testname_digits"},
	}
	for _, c := range cases {
		t.Run(c.test, func(t *testing.T) {
			t.Parallel()
			n := Name(t, c.prefix)
			if !nameRE.MatchString(n) {
				t.Fatalf("Name = %q, not SQL/Kafka safe", n)
			}
			head, suffix, ok := cut(n)
			if !ok || head != c.wantHead {
				t.Fatalf("Name = %q, want %q + _ + 12 hex digits", n, c.wantHead)
			}
			if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(suffix) {
				t.Fatalf("suffix of %q = %q, want 12 hex digits", n, suffix)
			}
		})
	}

	t.Run(strings.Repeat("VeryLongSubtestName", 10), func(t *testing.T) {
		t.Parallel()
		n := Name(t, "prefix")
		if len(n) != maxNameLen || !nameRE.MatchString(n) || !strings.HasPrefix(n, "prefix_testname_verylongsubtestname") {
			t.Fatalf("Name = %q (%d bytes), want a %d-byte safe name keeping the start", n, len(n), maxNameLen)
		}
	})

	t.Run("unique", func(t *testing.T) {
		t.Parallel()
		seen := make(map[string]bool)
		for range 10000 {
			n := Name(t, "u")
			if seen[n] {
				t.Fatalf("Name returned %q twice", n)
			}
			seen[n] = true
		}
	})
}

// cut splits a Name result into its head and random suffix.
func cut(n string) (head, suffix string, ok bool) {
	i := strings.LastIndexByte(n, '_')
	if i < 0 {
		return "", "", false
	}
	return n[:i], n[i+1:], true
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                  "",
		"TestFoo":           "testfoo",
		"TestFoo/bar_baz":   "testfoo_bar_baz",
		"a--b..c//d":        "a_b_c_d",
		"__x__":             "x",
		"ÉtéÜ":              "t",
		"Test#01/case 2!":   "test_01_case_2",
		"UPPER_lower_12_34": "upper_lower_12_34",
	} {
		if got := sanitize(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	var ctx context.Context
	t.Run("sub", func(t *testing.T) {
		ctx = Context(t)
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > DefaultTimeout || time.Until(dl) < DefaultTimeout/2 {
			t.Fatalf("deadline in %v (set %v), want about %v", time.Until(dl), ok, DefaultTimeout)
		}
		if ctx.Err() != nil {
			t.Fatalf("context done during the test: %v", ctx.Err())
		}
		t.Cleanup(func() {
			// Registered after Context: runs first, context still live.
			if ctx.Err() != nil {
				t.Errorf("context done inside a later cleanup: %v", ctx.Err())
			}
		})
	})
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the subtest, ctx.Err() = %v, want context.Canceled", ctx.Err())
	}

	short := ContextTimeout(t, 10*time.Millisecond)
	select {
	case <-short.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("ContextTimeout(10ms) not done after 5s")
	}
	if !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Fatalf("ContextTimeout err = %v, want DeadlineExceeded", short.Err())
	}
}

// recordingTB records Skip, Fatal and Errorf instead of acting on them;
// everything else (Name, Cleanup, Logf, ...) goes to the real test.
type recordingTB struct {
	testing.TB
	mu      sync.Mutex
	skipped bool
	failed  bool
	msg     string
	errors  []string // Errorf messages
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// errs returns the Errorf messages so far; safe while goroutines still log.
func (r *recordingTB) errs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errors)
}

func (r *recordingTB) stop(skipped bool, msg string) {
	r.mu.Lock()
	r.skipped, r.failed, r.msg = skipped, !skipped, msg
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recordingTB) Skip(args ...any)                 { r.stop(true, fmt.Sprint(args...)) }
func (r *recordingTB) Skipf(format string, args ...any) { r.stop(true, fmt.Sprintf(format, args...)) }
func (r *recordingTB) SkipNow()                         { r.stop(true, "") }
func (r *recordingTB) Fatal(args ...any)                { r.stop(false, fmt.Sprint(args...)) }
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.stop(false, fmt.Sprintf(format, args...))
}
func (r *recordingTB) FailNow() { r.stop(false, "") }

// record runs f on a recordingTB in its own goroutine (Skip and Fatal end it
// with runtime.Goexit) and returns what happened.
func record(t *testing.T, f func(tb testing.TB)) *recordingTB {
	r := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// noServices hides every service source from the test.
func noServices(t *testing.T) {
	for _, k := range []string{"KAFKA_BROKERS", "DATABASE_URL", "REDIS_URL", "S3_ENDPOINT"} {
		t.Setenv(k, "")
	}
	t.Setenv("PATH", t.TempDir()) // no initdb, redis-server, minio or go
	t.Setenv("GOPATH", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
}

func TestUnavailableSkipsOrFailsUnderCI(t *testing.T) {
	noServices(t)
	// PostgreSQL is left out: its binaries are also looked up in
	// /usr/lib/postgresql, which the test cannot hide.
	ctors := map[string]func(tb testing.TB){
		"Kafka":        func(tb testing.TB) { NewKafka(tb) },
		"Redis":        func(tb testing.TB) { NewRedis(tb) },
		"object store": func(tb testing.TB) { NewObjectStore(tb) },
	}
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		for what, ctor := range ctors {
			r := record(t, ctor)
			wantPrefix := "testkit: no " + what + ": "
			if !strings.HasPrefix(r.msg, wantPrefix) || !strings.Contains(r.msg, "unset") || !strings.Contains(r.msg, "fake not allowed") {
				t.Errorf("CI=%q %s: message %q, want prefix %q and the reasons", ci, what, r.msg, wantPrefix)
			}
			if ci == "true" && (!r.failed || r.skipped) {
				t.Errorf("CI=true %s: failed=%v skipped=%v, want a failure", what, r.failed, r.skipped)
			}
			if ci == "" && (!r.skipped || r.failed) {
				t.Errorf("CI unset %s: failed=%v skipped=%v, want a skip", what, r.failed, r.skipped)
			}
		}
	}
	r := record(t, func(tb testing.TB) { NewKafka(tb) })
	for _, want := range []string{"KAFKA_BROKERS unset", "no Docker engine", "fake not allowed"} {
		if !strings.Contains(r.msg, want) {
			t.Errorf("Kafka message %q lacks %q", r.msg, want)
		}
	}
	r = record(t, func(tb testing.TB) { NewRedis(tb) })
	if !strings.Contains(r.msg, "redis-server not found") {
		t.Errorf("Redis message %q does not say redis-server was not found", r.msg)
	}
}

func TestRequireReal(t *testing.T) {
	t.Setenv("CI", "")
	fake := &Kafka{Kind: "kfake"}
	real := &Kafka{Kind: "env", Real: true}
	if r := record(t, func(tb testing.TB) { RequireReal(tb, real, fake) }); !r.skipped || !strings.Contains(r.msg, "Kafka (kfake)") {
		t.Errorf("RequireReal(real, fake): skipped=%v msg=%q, want a skip naming Kafka (kfake)", r.skipped, r.msg)
	}
	if r := record(t, func(tb testing.TB) { RequireReal(tb, real) }); r.skipped || r.failed {
		t.Errorf("RequireReal(real): skipped=%v failed=%v, want neither", r.skipped, r.failed)
	}
	t.Setenv("CI", "true")
	if r := record(t, func(tb testing.TB) { RequireReal(tb, &ObjectStore{Dir: "/x", Kind: "dir"}) }); !r.failed {
		t.Errorf("RequireReal(dir) under CI: failed=%v, want a failure", r.failed)
	}
}

func TestDockerEngineCheckDoesNotPanic(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
	start := time.Now()
	for range 3 { // testcontainers caches its host lookup; repeat calls must not panic either
		if err := dockerEngine(t); err == nil || !strings.Contains(err.Error(), "no Docker engine") {
			t.Fatalf("dockerEngine = %v, want a no-Docker-engine error", err)
		}
	}
	if d := time.Since(start); d > 2*dockerCheckTimeout {
		t.Fatalf("three checks took %v", d)
	}
}
