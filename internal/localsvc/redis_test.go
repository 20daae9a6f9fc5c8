package localsvc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis starts a server (see started).
func startRedis(t *testing.T, o RedisOptions) *Redis {
	t.Helper()
	r, err := StartRedis(testContext(t), o)
	return started(t, r, err)
}

func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRedis starts a server in a temporary directory, uses it, and checks
// that Stop frees the port, removes the directory, and is idempotent.
func TestRedis(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	var log syncBuffer
	r := startRedis(t, RedisOptions{Log: &log})
	if want := fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port); r.URL != want {
		t.Fatalf("URL = %q, want %q", r.URL, want)
	}
	c := redisClient(t, r.URL)
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v", got, err)
	}
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	dir := cfg["dir"]
	if !strings.HasPrefix(filepath.Base(dir), "localsvc-redis-") || cfg["save"] != "" || cfg["appendonly"] != "no" || cfg["bind"] != "127.0.0.1" {
		t.Fatalf("config dir=%q save=%q appendonly=%q bind=%q", dir, cfg["save"], cfg["appendonly"], cfg["bind"])
	}
	if !strings.Contains(log.String(), "Ready to accept connections") || !strings.Contains(r.Output(), "Ready to accept connections") {
		t.Fatalf("startup message missing from Log (%q) or Output (%q)", log.String(), r.Output())
	}

	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertPortFree(t, r.Port)
	assertGone(t, dir)
	if err := ping(ctx, localAddr(r.Port)); err == nil {
		t.Fatal("server still answers PING after Stop")
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("second Stop = %v, want the first call's nil", err)
	}
}

// TestRedisGivenDirAndPort checks that Dir and Port are used, and that Stop
// keeps the caller's directory.
func TestRedisGivenDirAndPort(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "redis")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	r := startRedis(t, RedisOptions{Dir: dir, Port: port})
	if r.Port != port {
		t.Fatalf("Port = %d, want %d", r.Port, port)
	}
	got, err := redisClient(t, r.URL).ConfigGet(testContext(t), "dir").Result()
	if err != nil || got["dir"] != dir {
		t.Fatalf("CONFIG GET dir = %v, %v; want %q", got, err, dir)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	assertPortFree(t, port)
	if !dirExists(dir) {
		t.Fatalf("Stop removed the caller's Dir %s", dir)
	}
}

// TestRedisPortTaken asks for a port that is in use: the start fails with
// the server's output, without retrying on another port.
func TestRedisPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // hang up at once, so the readiness check fails fast
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	start := time.Now()
	r, err := StartRedis(testContext(t), RedisOptions{Port: port})
	if errors.Is(err, ErrNotFound) {
		t.Skip(err)
	}
	if err == nil {
		_ = r.Stop()
		t.Fatalf("StartRedis on a taken port %d succeeded", port)
	}
	msg := err.Error()
	if strings.Count(msg, "; output:") != 1 || !strings.Contains(msg, fmt.Sprintf("port %d", port)) || !strings.Contains(msg, "in use") {
		t.Fatalf("error %q: want one attempt on port %d with the server's address-in-use output", msg, port)
	}
	if d := time.Since(start); d > readyTimeout/2 {
		t.Fatalf("failing start took %v", d)
	}
}

// TestRedisStartCancelled: a cancelled context ends the start, leaving no
// server behind.
func TestRedisStartCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartRedis(ctx, RedisOptions{Port: port})
	if errors.Is(err, ErrNotFound) {
		t.Skip(err)
	}
	if !errors.Is(err, context.Canceled) {
		if r != nil {
			_ = r.Stop()
		}
		t.Fatalf("StartRedis with a cancelled context = %v, want context.Canceled", err)
	}
	assertPortFree(t, port)
}

// TestStopReportsEarlyExit: a server that died on its own is reported by
// Stop, with its output.
func TestStopReportsEarlyExit(t *testing.T) {
	t.Parallel()
	r := startRedis(t, RedisOptions{})
	if err := r.srv.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.srv.p.done
	err := r.Stop()
	if err == nil || !strings.Contains(err.Error(), "redis-server had exited before Stop") || !strings.Contains(err.Error(), "Ready to accept connections") {
		t.Fatalf("Stop after a crash = %v, want the early exit with the output", err)
	}
	if again := r.Stop(); again == nil || again.Error() != err.Error() {
		t.Fatalf("second Stop = %v, want the first call's %v", again, err)
	}
}
