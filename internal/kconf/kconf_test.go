package kconf_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/kconf"
)

func TestValidateAndOpts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     kconf.Config
		wantErr string
		opts    int
	}{
		{"plain brokers", kconf.Config{Brokers: []string{"a:9092"}}, "", 2},
		{"no brokers", kconf.Config{}, "no Kafka brokers", 0},
		{"scram", kconf.Config{Brokers: []string{"a:9092"}, SASLMechanism: "SCRAM-SHA-512", SASLUser: "u", SASLPassword: "p"}, "", 3},
		{"scram lowercase", kconf.Config{Brokers: []string{"a:9092"}, SASLMechanism: "scram-sha-256", SASLUser: "u"}, "", 3},
		{"plain sasl", kconf.Config{Brokers: []string{"a:9092"}, SASLMechanism: "PLAIN", SASLUser: "u"}, "", 3},
		{"sasl without user", kconf.Config{Brokers: []string{"a:9092"}, SASLMechanism: "PLAIN"}, "needs KAFKA_SASL_USER", 0},
		{"unknown mechanism", kconf.Config{Brokers: []string{"a:9092"}, SASLMechanism: "GSSAPI", SASLUser: "u"}, "unknown SASL mechanism", 0},
		{"tls", kconf.Config{Brokers: []string{"a:9093"}, TLS: true}, "", 3},
		{"tls missing CA file", kconf.Config{Brokers: []string{"a:9093"}, TLS: true, TLSCAFile: "/nonexistent/ca.pem"}, "read Kafka CA file", 0},
		// A CA file alone means TLS: it used to be ignored silently.
		{"CA file implies tls", kconf.Config{Brokers: []string{"a:9093"}, TLSCAFile: "/nonexistent/ca.pem"}, "read Kafka CA file", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.cfg.Opts()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Opts() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(opts) != tc.opts {
				t.Fatalf("got %d options, want %d", len(opts), tc.opts)
			}
		})
	}
}

func TestFromEnvAndRedaction(t *testing.T) {
	t.Setenv("KAFKA_BROKERS", " a:1, ,b:2 ")
	t.Setenv("KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
	t.Setenv("KAFKA_SASL_USER", "svc")
	t.Setenv("KAFKA_SASL_PASSWORD", "hunter2")
	t.Setenv("KAFKA_TLS", "TRUE")
	c := kconf.FromEnv()
	if strings.Join(c.Brokers, ",") != "a:1,b:2" || !c.TLS || c.SASLUser != "svc" {
		t.Fatalf("FromEnv = %+v", c)
	}
	if s := c.String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "REDACTED") {
		t.Fatalf("String() leaks or hides the password wrongly: %s", s)
	}
}

// KAFKA_TLS takes the values the CLI's --kafka-tls flag takes.
func TestFromEnvTLSValues(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "t": true, "True": true, "true": true, "0": false, "false": false, "": false, "yes": false} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("KAFKA_TLS", v)
			if got := kconf.FromEnv().TLS; got != want {
				t.Errorf("KAFKA_TLS=%q: TLS %v, want %v", v, got, want)
			}
		})
	}
}
