package kconf_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
)

// The SASL options authenticate against a SCRAM-enabled broker, and a wrong
// password is refused.
func TestSCRAMAgainstKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "sluice", "s3cret"), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	produce := func(password string) error {
		cfg := kconf.Config{Brokers: c.ListenAddrs(), SASLMechanism: "SCRAM-SHA-256", SASLUser: "sluice", SASLPassword: password}
		opts, err := cfg.Opts()
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0), kgo.RecordDeliveryTimeout(3*time.Second))...)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr()
	}
	if err := produce("s3cret"); err != nil {
		t.Fatalf("produce with the right password: %v", err)
	}
	if err := produce("wrong"); err == nil {
		t.Fatal("produce with a wrong password succeeded")
	}
}
