package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// KAFKA_TLS and S3_SECURE take the values their flags take (1, t, true,
// TRUE, 0, f, false…). Only "true" in any case used to enable them: with
// KAFKA_TLS=1 the CLI spoke plaintext to a TLS broker, while --kafka-tls=1
// enabled TLS; and a value that is no boolean at all was ignored instead of
// refused like the other invalid settings.
func TestBoolEnvVariables(t *testing.T) {
	k := testkit.NewKafka(t, testkit.ForceFake())
	brokers := strings.Join(k.Brokers, ",")

	t.Run("KAFKA_TLS=1 enables TLS", func(t *testing.T) {
		t.Setenv("KAFKA_TLS", "1")
		// A listener that records the first byte a client sends: 0x16 opens
		// a TLS handshake, a Kafka request starts with its int32 size.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		first := make(chan byte, 1)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err == nil {
					select {
					case first <- b[0]:
					default:
					}
				}
				c.Close()
			}
		}()
		_, err = runCLI(t, "topics", "list", "--brokers", ln.Addr().String(), "--timeout", "5s")
		if err == nil {
			t.Fatal("topics list against a listener that closes every connection: no error")
		}
		select {
		case b := <-first:
			if b != 0x16 {
				t.Fatalf("first byte sent with KAFKA_TLS=1: %#x, want 0x16 (a TLS handshake)", b)
			}
		default:
			t.Fatalf("the client sent nothing: %v", err)
		}
	})
	t.Run("--kafka-tls=false overrides KAFKA_TLS=1", func(t *testing.T) {
		t.Setenv("KAFKA_TLS", "1")
		if out, err := runCLI(t, "topics", "list", "--brokers", brokers, "--kafka-tls=false", "--timeout", "5s"); err != nil {
			t.Fatalf("topics list: %v\n%s", err, out)
		}
	})
	t.Run("KAFKA_TLS=0 disables TLS", func(t *testing.T) {
		t.Setenv("KAFKA_TLS", "0")
		if out, err := runCLI(t, "topics", "list", "--brokers", brokers, "--timeout", "5s"); err != nil {
			t.Fatalf("topics list: %v\n%s", err, out)
		}
	})
	t.Run("KAFKA_TLS=maybe is refused", func(t *testing.T) {
		t.Setenv("KAFKA_TLS", "maybe")
		_, err := runCLI(t, "topics", "list", "--brokers", brokers)
		singleLine(t, err, `invalid KAFKA_TLS="maybe"`)
	})

	// A plain-HTTP "S3" endpoint: with S3_SECURE=1 the client must speak
	// HTTPS to it and fail.
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer plain.Close()
	endpoint := strings.TrimPrefix(plain.URL, "http://")
	t.Run("S3_SECURE=1 enables HTTPS", func(t *testing.T) {
		t.Setenv("S3_SECURE", "1")
		out, err := runCLI(t, "ingest", "bootstrap", "--brokers", brokers, "--s3-endpoint", endpoint, "--s3-access-key", "k", "--s3-secret-key", "s")
		if err == nil || !strings.Contains(err.Error(), "HTTPS") {
			t.Fatalf("ingest bootstrap against a plain-HTTP endpoint with S3_SECURE=1: %v\n%s\nwant an HTTPS error", err, out)
		}
	})
	t.Run("S3_SECURE=maybe is refused", func(t *testing.T) {
		t.Setenv("S3_SECURE", "maybe")
		_, err := runCLI(t, "ingest", "bootstrap", "--brokers", brokers, "--s3-endpoint", endpoint)
		singleLine(t, err, `invalid S3_SECURE="maybe"`)
	})
}
