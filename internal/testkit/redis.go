package testkit

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/localsvc"
)

// Redis is a Redis database for one test. Keys must start with Prefix; on a
// shared server (Kind "env") keys under Prefix are deleted on cleanup.
type Redis struct {
	// URL names the server and the logical database. It may contain a
	// password: do not log it.
	URL string
	// Client is a go-redis client on URL, closed on cleanup.
	Client *redis.Client
	// Prefix is a unique key prefix for this test, e.g. "t_testfoo_1a2b3c4d:".
	Prefix string
	// DB is the logical database number.
	DB int
	// Real is false for miniredis.
	Real bool
	// Kind is where the server came from: "env" (REDIS_URL), "local"
	// (redis-server started for this test) or "miniredis".
	Kind string

	fake *miniredis.Miniredis
}

// NewRedis hands the test a Redis database. Order: REDIS_URL (it must
// answer PING, or the test fails); redis-server on PATH started on a free
// port in a temporary directory without persistence (stopped on cleanup);
// miniredis in process when FakeOK is given (closed on cleanup); else the
// test is skipped (failed under CI=true). WithRedisDB(n) selects the logical
// database; otherwise the one in REDIS_URL, or 0.
func NewRedis(t testing.TB, opts ...Option) *Redis {
	t.Helper()
	o := collect(opts)
	r := &Redis{Prefix: Name(t, "t") + ":"}
	var why reasons
	switch u := os.Getenv("REDIS_URL"); {
	case u != "":
		r.URL, r.Real, r.Kind = u, true, "env"
	default:
		why.add("REDIS_URL unset")
		u, err := startLocalRedis(t)
		if err == nil {
			r.URL, r.Real, r.Kind = u, true, "local"
			break
		}
		why.addLocal(t, "redis-server", err)
		if !o.fakeOK {
			why.add("fake not allowed")
			unavailable(t, "no Redis: %s", why)
			return nil
		}
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			t.Fatalf("testkit: start miniredis: %v", err)
		}
		t.Cleanup(m.Close)
		r.URL, r.Kind, r.fake = "redis://"+m.Addr(), "miniredis", m
	}

	ropts, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatalf("testkit: parse %s URL: %v", r, err)
	}
	r.DB = ropts.DB
	if o.redisDBOK && o.redisDB != r.DB {
		if r.URL, err = withRedisDB(r.URL, o.redisDB); err != nil {
			t.Fatalf("testkit: %s: %v", r, err)
		}
		if ropts, err = redis.ParseURL(r.URL); err != nil {
			t.Fatalf("testkit: parse %s URL: %v", r, err)
		}
		r.DB = ropts.DB
	}
	r.Client = redis.NewClient(ropts)
	t.Cleanup(func() { _ = r.Client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		t.Fatalf("testkit: PING %s: %v", r, err)
	}
	if r.Kind == "env" {
		t.Cleanup(func() {
			if err := deleteRedisPrefix(ropts, r.Prefix); err != nil {
				t.Logf("testkit: delete keys %s*: %v", r.Prefix, err)
			}
		})
	}
	return r
}

// Fake returns the miniredis server (for FastForward and friends: miniredis
// expires keys only when told to), or nil when the server is real.
func (r *Redis) Fake() *miniredis.Miniredis { return r.fake }

// IsReal implements Service.
func (r *Redis) IsReal() bool { return r.Real }

// String implements Service; it never includes the URL.
func (r *Redis) String() string { return fmt.Sprintf("Redis (%s) db %d", r.Kind, r.DB) }

// Key returns Prefix + name.
func (r *Redis) Key(name string) string { return r.Prefix + name }

// withRedisDB returns redisURL selecting database db.
func withRedisDB(redisURL string, db int) (string, error) {
	u, err := url.Parse(redisURL)
	if err != nil {
		return "", fmt.Errorf("parse Redis URL: %w", err)
	}
	if u.Scheme == "unix" {
		q := u.Query()
		q.Set("db", strconv.Itoa(db))
		u.RawQuery = q.Encode()
	} else {
		u.Path = "/" + strconv.Itoa(db)
	}
	return u.String(), nil
}

// deleteRedisPrefix unlinks every key under prefix, on a client of its own
// (the test may have closed Client).
func deleteRedisPrefix(opts *redis.Options, prefix string) error {
	ctx, cancel := cleanupContext()
	defer cancel()
	c := redis.NewClient(opts)
	defer c.Close()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := c.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	it := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return flush()
}

// startLocalRedis starts redis-server with localsvc, stopped on t's
// cleanup, and returns its URL. The error wraps localsvc.ErrNotFound when
// there is no binary.
func startLocalRedis(t testing.TB) (string, error) {
	t.Helper()
	r, err := startLocal(t, "redis-server", func(ctx context.Context) (*localsvc.Redis, error) {
		return localsvc.StartRedis(ctx, localsvc.RedisOptions{})
	})
	if err != nil {
		return "", err
	}
	return r.URL, nil
}
