package localsvc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// RedisOptions configures StartRedis. The zero value is valid.
type RedisOptions struct {
	// Dir is the server's working directory. Empty: a fresh temporary
	// directory, removed by Stop. Set: the caller's, created if missing and
	// kept by Stop. The server persists nothing (no RDB, no AOF).
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Log receives the server's output (nil: only kept for Output and
	// errors).
	Log io.Writer
}

// Redis is a running local redis-server. Its methods are safe for
// concurrent use.
type Redis struct {
	// URL is redis://127.0.0.1:PORT/0 (no password).
	URL string
	// Port is the TCP port on 127.0.0.1.
	Port int

	srv *server
}

// StartRedis starts redis-server from PATH on 127.0.0.1, without
// persistence or protected mode, and returns when it answers PING. ctx
// bounds the wait, not the server. The error wraps ErrNotFound when there
// is no redis-server; on any error nothing is left running and a temporary
// Dir is removed.
func StartRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	bin, err := findBinary("redis-server")
	if err != nil {
		return nil, err
	}
	srv, port, err := launch{
		name:    "redis-server",
		pattern: "localsvc-redis-",
		proc: func(dir string, port int) procSpec {
			return procSpec{
				path: bin,
				args: []string{
					"--port", strconv.Itoa(port),
					"--bind", "127.0.0.1",
					"--dir", dir,
					"--save", "",
					"--appendonly", "no",
					"--protected-mode", "no",
					"--daemonize", "no",
					"--logfile", "",
				},
			}
		},
		ready: func(ctx context.Context, port int) error { return ping(ctx, localAddr(port)) },
	}.start(ctx, common{dir: o.Dir, port: o.Port, log: o.Log})
	if err != nil {
		return nil, err
	}
	return &Redis{URL: "redis://" + localAddr(port) + "/0", Port: port, srv: srv}, nil
}

// Output returns the last 64 KiB of the server's output.
func (r *Redis) Output() string { return r.srv.output() }

// Stop stops the server (SIGTERM, SIGKILL after 10s) and removes its
// directory if StartRedis created it. It returns the first call's result on
// every call, and reports a server that had exited on its own before Stop.
func (r *Redis) Stop() error { return r.srv.stop() }

// ping sends PING over RESP and expects +PONG. It is used while a server
// starts, instead of go-redis, whose pool logs every refused dial.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
