package run

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WithTopicCheckInterval sets the period of the input-topic watch (see
// watchTopics), so that tests see a deleted or recreated topic quickly.
func WithTopicCheckInterval(d time.Duration) Option {
	return func(o *options) { o.topicCheck = d }
}

// WithLagInterval sets the period of the lag gauge's end-offset listing
// (see watchLag), so that tests see the gauge move quickly.
func WithLagInterval(d time.Duration) Option {
	return func(o *options) { o.lagEvery = d }
}

// TxnID exposes txnID.
func TxnID(group string, cl *kgo.Client) string { return txnID(group, cl) }
