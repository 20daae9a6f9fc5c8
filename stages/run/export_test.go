package run

import "time"

// WithTopicCheckInterval sets the period of the input-topic watch (see
// watchTopics), so that tests see a deleted or recreated topic quickly.
func WithTopicCheckInterval(d time.Duration) Option {
	return func(o *options) { o.topicCheck = d }
}
