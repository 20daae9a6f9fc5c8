package main

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testkit"
)

// tcpOpts reads the socket options postgresDialer sets.
func tcpOpts(t *testing.T, c net.Conn) map[string]int {
	t.Helper()
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("connection is %T, not TCP", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{
			"user_timeout_ms": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
			"keepalive":       {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
			"keepidle_s":      {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
			"keepintvl_s":     {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
			"keepcnt":         {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
		} {
			v, err := unix.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				gerr = err
				return
			}
			got[name] = v
		}
	}); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return got
}

func wantOpts() map[string]int {
	return map[string]int{
		"user_timeout_ms": 60_000,
		"keepalive":       1,
		"keepidle_s":      15,
		"keepintvl_s":     5,
		"keepcnt":         4,
	}
}

func checkOpts(t *testing.T, got map[string]int) {
	t.Helper()
	for k, want := range wantOpts() {
		if got[k] != want {
			t.Errorf("%s = %d, want %d", k, got[k], want)
		}
	}
}

// The pool's dialer sets the keepalive and TCP_USER_TIMEOUT options that
// bound a write blocked on a dead connection.
func TestPostgresDialerSocketOptions(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, err := postgresPoolConfig("postgres://u:p@" + ln.Addr().String() + "/db")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := cfg.ConnConfig.DialFunc(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkOpts(t, tcpOpts(t, c))

	// A Unix socket path is dialed as before (no TCP options to set).
	dir := t.TempDir()
	uln, err := net.Listen("unix", dir+"/.s.PGSQL.5432")
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	uc, err := cfg.ConnConfig.DialFunc(ctx, "unix", dir+"/.s.PGSQL.5432")
	if err != nil {
		t.Fatalf("unix socket: %v", err)
	}
	uc.Close()
}

// A real connection of the pool connectPostgres opens carries the options.
func TestConnectPostgresSocketOptions(t *testing.T) {
	t.Parallel()
	// DATABASE_URL, else the package's local server (TestMain), else a
	// skip naming why.
	url := testkit.NewPostgresServer(t).URL
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.Host == "" || cfg.ConnConfig.Host[0] == '/' {
		t.Skip("DATABASE_URL uses a Unix socket")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := connectPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	checkOpts(t, tcpOpts(t, conn.Conn().PgConn().Conn()))
}
