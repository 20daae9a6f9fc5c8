package testkit

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Ports ListenAddr picks from: below Linux's default ephemeral range
// (32768–60999, the local ports of outgoing connections) and below every
// port of the local stack (deploy/stack: 15432 and up, with its offsets).
const (
	listenPortMin = 10000
	listenPortMax = 15000
)

// ListenAddr returns a loopback address ("127.0.0.1:port") that was free a
// moment ago, for a server the test starts in a way that cannot hand back
// its listener (a CLI's --ops-addr). Unlike a port 0 listener closed
// again, its port is outside the ephemeral range, so the test's own
// outgoing connections (Kafka, PostgreSQL, Redis clients of parallel
// tests) cannot take it before the server binds it; only another test
// picking the same random port can.
func ListenAddr(t testing.TB) string {
	t.Helper()
	for range 200 {
		addr := fmt.Sprintf("127.0.0.1:%d", listenPortMin+rand.IntN(listenPortMax-listenPortMin))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if err := ln.Close(); err != nil {
			t.Fatalf("testkit: close %s: %v", addr, err)
		}
		return addr
	}
	t.Fatalf("testkit: no free port in %d–%d after 200 tries", listenPortMin, listenPortMax-1)
	return ""
}
