// Package kconf turns sluice's Kafka connection settings (brokers, SASL, TLS)
// into franz-go client options. It is shared by the CLI, the runtime and the
// admin commands so that every client connects the same way.
package kconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config holds Kafka connection settings. The zero value is not valid: set
// Brokers. Password is never logged: String redacts it.
type Config struct {
	// Brokers is the seed broker list (env KAFKA_BROKERS, comma separated).
	Brokers []string
	// SASLMechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512"
	// (env KAFKA_SASL_MECHANISM).
	SASLMechanism string
	// SASLUser and SASLPassword (env KAFKA_SASL_USER, KAFKA_SASL_PASSWORD).
	SASLUser     string
	SASLPassword string
	// TLS enables TLS (env KAFKA_TLS=true); TLSCAFile adds a CA bundle
	// (env KAFKA_TLS_CA_FILE) and implies TLS; TLSInsecure skips
	// verification (tests only).
	TLS         bool
	TLSCAFile   string
	TLSInsecure bool
	// ClientID identifies the client to the brokers (default "sluice").
	ClientID string
}

// FromEnv reads the KAFKA_* variables. KAFKA_TLS takes 1, t, true, 0, f,
// false and their capitalised forms; another value is false.
func FromEnv() Config {
	c := Config{
		SASLMechanism: os.Getenv("KAFKA_SASL_MECHANISM"),
		SASLUser:      os.Getenv("KAFKA_SASL_USER"),
		SASLPassword:  os.Getenv("KAFKA_SASL_PASSWORD"),
		TLSCAFile:     os.Getenv("KAFKA_TLS_CA_FILE"),
		ClientID:      "sluice",
	}
	c.Brokers = SplitBrokers(os.Getenv("KAFKA_BROKERS"))
	// The values strconv.ParseBool takes, as the CLI's --kafka-tls flag;
	// anything else is false here (the CLI refuses it).
	c.TLS, _ = strconv.ParseBool(os.Getenv("KAFKA_TLS"))
	return c
}

// SplitBrokers splits a comma-separated broker list, dropping blanks.
func SplitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no Kafka brokers: set KAFKA_BROKERS or --brokers")
	}
	switch strings.ToUpper(c.SASLMechanism) {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.SASLUser == "" {
			return fmt.Errorf("SASL mechanism %s needs KAFKA_SASL_USER", c.SASLMechanism)
		}
	default:
		return fmt.Errorf("unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", c.SASLMechanism)
	}
	return nil
}

// String describes the config with the password redacted.
func (c Config) String() string {
	pw := ""
	if c.SASLPassword != "" {
		pw = "REDACTED"
	}
	return fmt.Sprintf("brokers=%s sasl=%s user=%s password=%s tls=%t", strings.Join(c.Brokers, ","), c.SASLMechanism, c.SASLUser, pw, c.TLS)
}

// Opts returns the client options for c: seed brokers, client id, SASL and TLS.
func (c Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	id := c.ClientID
	if id == "" {
		id = "sluice"
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(id)}
	switch strings.ToUpper(c.SASLMechanism) {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASLUser, Pass: c.SASLPassword}.AsSha512Mechanism()))
	}
	if c.TLS || c.TLSCAFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.TLSInsecure} //nolint:gosec // opt-in for tests
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("read Kafka CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificates in %s", c.TLSCAFile)
			}
			cfg.RootCAs = pool
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	return opts, nil
}
