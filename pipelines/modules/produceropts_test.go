package modules_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/modules"
)

// A client producing awaited refresh requests and states does not linger
// (franz-go's default does), and the caller's options are not modified.
func TestProducerOptsNoLinger(t *testing.T) {
	t.Parallel()
	base := make([]kgo.Opt, 1, 4)
	base[0] = kgo.SeedBrokers("127.0.0.1:1")
	def, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	if l := def.OptValue(kgo.ProducerLinger).(time.Duration); l == 0 {
		t.Fatalf("franz-go's default linger is 0: the test shows nothing")
	}
	cl, err := kgo.NewClient(modules.ProducerOpts(base)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if l := cl.OptValue(kgo.ProducerLinger).(time.Duration); l != 0 {
		t.Errorf("linger %s, want 0", l)
	}
	if got := base[:cap(base)][1]; got != nil {
		t.Errorf("ProducerOpts wrote into the caller's slice: %v", got)
	}
}
