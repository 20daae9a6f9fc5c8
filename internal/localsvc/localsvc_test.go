package localsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for concurrent use, for Log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testContext is cancelled when t ends, after at most two minutes.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// started returns s after a Start call: it skips t when err says the
// server is not installed, fails t on another error, and stops s when t
// ends (Stop is idempotent, so the test may also stop it itself).
func started[S interface{ Stop() error }](t *testing.T, s S, err error) S {
	t.Helper()
	if errors.Is(err, ErrNotFound) {
		t.Skipf("not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// reachableDir returns a fresh directory, removed when t ends, whose parents
// any OS user can search, so that a server running as "postgres" under
// root can use a directory below it.
func reachableDir(t *testing.T) string {
	t.Helper()
	parent := os.TempDir()
	if !worldTraversable(parent) {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "localsvc-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// assertPortFree fails t unless port on 127.0.0.1 can be bound again.
func assertPortFree(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", localAddr(port))
	if err != nil {
		t.Fatalf("port %d not free after Stop: %v", port, err)
	}
	_ = l.Close()
}

// assertGone fails t if path exists.
func assertGone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still exists after Stop (stat: %v)", path, err)
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	var also bytes.Buffer
	b := &tailBuffer{max: 8, also: &also}
	for _, s := range []string{"  abc", "defgh", "ijk\n"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "efghijk" { // last 8 bytes "efghijk\n", trimmed
		t.Fatalf("tail = %q, want %q", got, "efghijk")
	}
	if also.String() != "  abcdefghijk\n" {
		t.Fatalf("also got %q, want everything", also.String())
	}

	failing := &tailBuffer{max: 8, also: failWriter{}}
	if n, err := failing.Write([]byte("xyz")); n != 3 || err != nil || failing.String() != "xyz" {
		t.Fatalf("with a failing Log: Write = %d, %v; tail %q", n, err, failing.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken") }

func TestFindBinary(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string, mode os.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("path/tool", 0o755)
	mk("pg/9.6/bin/initdb", 0o755)
	mk("pg/15/bin/initdb", 0o755)
	mk("pg/10/bin/initdb", 0o755)
	mk("pg/16/bin/initdb", 0o644) // not executable: skipped
	mk("pg/16/bin/other", 0o755)
	t.Setenv("PATH", filepath.Join(root, "path"))
	glob := filepath.Join(root, "pg", "*", "bin")

	for _, c := range []struct {
		name    string
		dirs    []string
		want    string // path below root; "" = not found
		wantMsg string
	}{
		{"tool", nil, "path/tool", ""},
		{"tool", []string{glob}, "path/tool", ""}, // PATH first
		{"initdb", []string{glob}, "pg/15/bin/initdb", ""},
		{"other", []string{filepath.Join(root, "nowhere"), glob}, "pg/16/bin/other", ""},
		{"initdb", nil, "", "initdb not found on PATH"},
		{"minio", []string{glob}, "", "minio not found on PATH or in " + glob},
	} {
		got, err := findBinary(c.name, c.dirs...)
		if c.want == "" {
			if !errors.Is(err, ErrNotFound) || err.Error() != c.wantMsg {
				t.Errorf("findBinary(%q, %q) = %q, %v; want ErrNotFound %q", c.name, c.dirs, got, err, c.wantMsg)
			}
			continue
		}
		if want := filepath.Join(root, c.want); got != want || err != nil {
			t.Errorf("findBinary(%q, %q) = %q, %v; want %q", c.name, c.dirs, got, err, want)
		}
	}
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server, minio or go
	t.Setenv("GOPATH", t.TempDir())
	ctx := testContext(t)
	if r, err := StartRedis(ctx, RedisOptions{}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "redis-server not found") {
		t.Errorf("StartRedis without redis-server = %v, %v; want ErrNotFound", r, err)
	}
	if m, err := StartMinio(ctx, MinioOptions{}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "minio not found") {
		t.Errorf("StartMinio without minio = %v, %v; want ErrNotFound", m, err)
	}
	// A given Dir is not created when the binary is missing.
	dir := filepath.Join(t.TempDir(), "never")
	if _, err := StartRedis(ctx, RedisOptions{Dir: dir}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("StartRedis = %v", err)
	}
	assertGone(t, dir)
}

func TestServerDirUnreachableForOtherUser(t *testing.T) {
	t.Parallel()
	private := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	u := &osUser{name: "nobody-in-particular", uid: 65534, gid: 65534}
	dir := filepath.Join(private, "pg")
	_, _, err := serverDir(dir, "x-", u)
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "/tmp") {
		t.Fatalf("serverDir under a 0700 parent for another user = %v, want a cannot-reach error suggesting /tmp", err)
	}
	assertGone(t, dir)
}

func TestPostgresURL(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]string{
		"postgres":   "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable",
		"demo_1":     "postgres://postgres@127.0.0.1:5433/demo_1?sslmode=disable",
		"with space": "postgres://postgres@127.0.0.1:5433/with%20space?sslmode=disable",
	} {
		if got := postgresURL(5433, db); got != want {
			t.Errorf("postgresURL(5433, %q) = %q, want %q", db, got, want)
		}
	}
}

// ExampleStartPostgres shows the intended use outside tests.
func ExampleStartPostgres() {
	ctx := context.Background()
	pg, err := StartPostgres(ctx, PostgresOptions{})
	if errors.Is(err, ErrNotFound) {
		fmt.Println("install PostgreSQL:", err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pg.Stop()
	url, err := pg.CreateDatabase(ctx, "demo")
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = url // hand it to the code that needs a database
}

func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
