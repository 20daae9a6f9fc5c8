package main

import (
	"net"
	"time"
)

// PostgreSQL connections detect a peer that vanished without a word (a host
// powered off, a network partition, packets silently dropped) within about a
// minute instead of the kernel's defaults (keepalive after 15 s, then 9
// probes 15 s apart; unacknowledged data retransmitted for ~15 min), so that
// a sink write blocked on such a connection fails, is retried on a new
// connection and its partition moves on.
const (
	// pgKeepAliveIdle is the idle time before the first keepalive probe.
	pgKeepAliveIdle = 15 * time.Second
	// pgKeepAliveInterval is the time between unanswered probes.
	pgKeepAliveInterval = 5 * time.Second
	// pgKeepAliveCount is the number of unanswered probes that close the
	// connection (15 s + 4 × 5 s: a dead idle connection is seen in 35 s)
	// where TCP_USER_TIMEOUT does not exist. On Linux, where it is set,
	// it replaces the count: the connection closes once probes went
	// unanswered for pgUserTimeout.
	pgKeepAliveCount = 4
	// pgUserTimeout (Linux TCP_USER_TIMEOUT) bounds how long data sent to
	// the server, or keepalive probes, may stay unacknowledged before the
	// connection is closed. The server's kernel acknowledges, not
	// PostgreSQL, so a busy or lock-waiting server never trips it.
	pgUserTimeout = 60 * time.Second
)

// postgresDialer returns the dialer of sluice's PostgreSQL connections:
// connectTimeout per attempt, the keepalive settings above and, on Linux,
// TCP_USER_TIMEOUT (see setUserTimeout).
func postgresDialer() *net.Dialer {
	return &net.Dialer{
		Timeout: connectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     pgKeepAliveIdle,
			Interval: pgKeepAliveInterval,
			Count:    pgKeepAliveCount,
		},
		Control: setUserTimeout(pgUserTimeout),
	}
}
