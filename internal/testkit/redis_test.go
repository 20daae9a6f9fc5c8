package testkit

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// checkRedis checks that r works, that WithRedisDB selects a database, and
// (on a shared server) that the test's keys are deleted on cleanup.
func checkRedis(t *testing.T, opts ...Option) {
	t.Helper()
	var (
		url, key string
		kind     string
	)
	t.Run("db1", func(t *testing.T) {
		r := NewRedis(t, append(opts, WithRedisDB(1))...)
		t.Logf("using %s", r)
		url, key, kind = r.URL, r.Key("k"), r.Kind
		if r.DB != 1 || !strings.HasSuffix(r.URL, "/1") {
			t.Fatalf("WithRedisDB(1): DB=%d URL ends %q", r.DB, r.URL[strings.LastIndexByte(r.URL, '/'):])
		}
		if !strings.HasPrefix(key, r.Prefix) || !strings.HasSuffix(r.Prefix, ":") || !nameRE.MatchString(strings.TrimSuffix(r.Prefix, ":")) {
			t.Fatalf("Prefix %q, Key %q", r.Prefix, key)
		}
		ctx := Context(t)
		if err := r.Client.Set(ctx, key, "v1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := r.Client.Get(ctx, key).Result(); err != nil || got != "v1" {
			t.Fatalf("GET %s = %q, %v", key, got, err)
		}
		r0 := NewRedis(t, append(opts, WithRedisDB(0))...)
		if r0.Kind == r.Kind && r0.Kind != "env" {
			// A local server or miniredis is per call; look at DB 0 of
			// this one instead.
			opt, _ := redis.ParseURL(strings.TrimSuffix(r.URL, "/1") + "/0")
			c := redis.NewClient(opt)
			defer c.Close()
			if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("key %s visible in DB 0 (exists=%d err=%v)", key, n, err)
			}
		} else if n, err := r0.Client.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Fatalf("key %s visible in DB 0 (exists=%d err=%v)", key, n, err)
		}
		if r0.Prefix == r.Prefix {
			t.Fatalf("two NewRedis calls share prefix %q", r.Prefix)
		}
	})
	if t.Failed() || kind != "env" {
		return
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("key %s survived its test on the shared server (exists=%d err=%v)", key, n, err)
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	checkRedis(t, FakeOK())
}

func TestRedisMiniredis(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("PATH", t.TempDir()) // hide redis-server
	r := NewRedis(t, FakeOK())
	if r.Kind != "miniredis" || r.Real || r.Fake() == nil {
		t.Fatalf("got %s real=%v fake=%v, want miniredis", r, r.Real, r.Fake())
	}
	ctx := Context(t)
	if err := r.Client.Set(ctx, r.Key("ttl"), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	r.Fake().FastForward(2 * time.Minute)
	if n, err := r.Client.Exists(ctx, r.Key("ttl")).Result(); err != nil || n != 0 {
		t.Fatalf("after FastForward the key still exists (n=%d err=%v)", n, err)
	}
	checkRedis(t, FakeOK())
}

func TestRedisLocalBinary(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	if _, err := exec.LookPath("redis-server"); err != nil { // localsvc looks on PATH only
		t.Skipf("no redis-server to test the local path: %v", err)
	}
	var url string
	t.Run("server", func(t *testing.T) {
		r := NewRedis(t)
		if r.Kind != "local" || !r.Real || r.Fake() != nil {
			t.Fatalf("got %s, want a local redis-server", r)
		}
		url = r.URL
		checkRedis(t)
	})
	if url == "" {
		return
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", opt.Addr, 5*time.Second); err == nil {
		conn.Close()
		t.Fatal("local redis-server still accepts connections after its test ended")
	}
}

func TestRedisEnvPrecedence(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0") // nothing listens on port 1
	r := record(t, func(tb testing.TB) { NewRedis(tb, FakeOK()) })
	if !r.failed || !strings.Contains(r.msg, "Redis (env)") {
		t.Fatalf("unreachable REDIS_URL: failed=%v msg=%q, want a failure naming Redis (env)", r.failed, r.msg)
	}
}

func TestWithRedisDB(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"},
		{"redis://:pw@h:6379", "redis://:pw@h:6379/1"},
		{"rediss://u:pw@h:6380/5?dial_timeout=3s", "rediss://u:pw@h:6380/1?dial_timeout=3s"},
		{"unix:///run/redis.sock?db=0", "unix:///run/redis.sock?db=1"},
	} {
		got, err := withRedisDB(c.in, 1)
		if err != nil || got != c.want {
			t.Errorf("withRedisDB(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
