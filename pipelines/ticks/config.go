package ticks

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/stages/ratelimit"
	"github.com/sluicehq/sluice/stages/run"
)

// Config configures the ticks pipeline. Zero fields take the defaults
// documented on each field.
type Config struct {
	// TasksTopic, JobsTopic and DLQTopic: tasks and jobs must have the
	// same partition count. Group is the worker consumer group. Empty
	// names default to the declared ones (Declare); tests set them for
	// isolation.
	TasksTopic, JobsTopic, DLQTopic string
	Group                           string
	// Source is the tick source (default: NewSynthetic with its defaults).
	Source Source
	// SourceName names the source in rate-limit keys and metrics
	// (default "ib").
	SourceName string
	// DefaultAccount is used for tasks without an account_id
	// (default "default").
	DefaultAccount string
	// RateLimit configures the Redis limiter in front of the source.
	RateLimit RateLimitConfig
	// SegmentMaxTicks is the max ticks per source request and segment file
	// (default 1000, IB's maximum).
	SegmentMaxTicks int
	// SourceTimeout bounds one source call (default 60s).
	SourceTimeout time.Duration
	// Retry is the retry policy of tasks (the runtime's, Runtime.Retry is
	// replaced by it): a segment's transient failures (source errors,
	// object-store errors) are retried up to MaxAttempts attempts in all
	// (default 6), then the task goes to the DLQ with retries_exhausted and
	// the job is FAILED. Backoff is exponential with jitter (default 500ms
	// → 30s). Rate-limit denials and limiter outages are waits, not
	// attempts: they never fail a job.
	Retry run.RetryPolicy
	// PacingBackoff is the minimum wait after a pacing violation
	// (default 15s).
	PacingBackoff time.Duration
	// SessionSettle is how long after a session's end the Coordinator
	// accepts a trigger for it (default 1m): a job is ingested once its
	// session has ended, since a source returns only the ticks up to now
	// and the job would otherwise be COMPLETED with part of the day. The
	// worker refuses (sanity_fail, rule ticks.session) a trigger or
	// bootstrap command whose session has not ended by its own clock, so
	// SessionSettle also absorbs that much clock skew between them.
	SessionSettle time.Duration
	// Runtime holds optional runtime knobs (batching, commit interval,
	// revoke timeout). Name, Group, Topics, DLQTopic and Retry (see Retry
	// above) are set by the pipeline.
	Runtime run.Config
	// Supervisor configures stall detection and bootstrap.
	Supervisor SupervisorConfig
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// RateLimitConfig configures the limiter of source requests.
type RateLimitConfig struct {
	// Disabled turns the limiter off (no Redis needed). Never in production
	// against IB.
	Disabled bool
	// Windows default to ratelimit.DefaultWindows() (10m:60, 1m:20, 1s:2).
	Windows []ratelimit.Window
	// Backoff shapes waits after denials (default 50ms → 5s extra).
	Backoff ratelimit.Backoff
	// KeyPrefix is prepended to the limiter keys (default none).
	KeyPrefix string
}

// SupervisorConfig configures the supervisor service.
type SupervisorConfig struct {
	// Enabled adds the supervisor to Services.
	Enabled bool
	// Interval is the period of stall scans (default 30s).
	Interval time.Duration
	// StallAfter is the heartbeat age after which a RUNNING or PENDING job
	// is STALLED (default 10m).
	StallAfter time.Duration
	// Retrigger starts a new instance from the cursor of a stalled job.
	Retrigger bool
	// BootstrapOnStart rebuilds lost job states from the object store when
	// the supervisor starts.
	BootstrapOnStart bool
}

func (c Config) withDefaults() Config {
	c = c.named(Declare(Config{}), true)
	if c.Source == nil {
		c.Source = NewSynthetic(SyntheticConfig{})
	}
	if c.SourceName == "" {
		c.SourceName = "ib"
	}
	if c.DefaultAccount == "" {
		c.DefaultAccount = "default"
	}
	if c.SegmentMaxTicks <= 0 || c.SegmentMaxTicks > 1000 {
		c.SegmentMaxTicks = 1000
	}
	if c.SourceTimeout <= 0 {
		c.SourceTimeout = time.Minute
	}
	if c.Retry.MaxAttempts <= 0 {
		c.Retry.MaxAttempts = 6
	}
	if c.Retry.Initial <= 0 {
		c.Retry.Initial = 500 * time.Millisecond
	}
	if c.Retry.Max <= 0 {
		c.Retry.Max = 30 * time.Second
	}
	if c.Retry.Jitter <= 0 {
		c.Retry.Jitter = 0.2
	}
	if c.PacingBackoff <= 0 {
		c.PacingBackoff = 15 * time.Second
	}
	if c.SessionSettle <= 0 {
		c.SessionSettle = time.Minute
	}
	if c.Supervisor.Interval <= 0 {
		c.Supervisor.Interval = 30 * time.Second
	}
	if c.Supervisor.StallAfter <= 0 {
		c.Supervisor.StallAfter = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	rt := c.Runtime
	rt.Name = "ticks"
	rt.Group = c.Group
	rt.Topics = []string{c.TasksTopic}
	rt.DLQTopic = c.DLQTopic
	if rt.BatchMaxRecords <= 0 {
		rt.BatchMaxRecords = 20 // every task is a network fetch: small batches keep commits close
	}
	rt.Retry = c.Retry
	c.Runtime = rt
	return c
}

func (c Config) validate() error {
	if c.TasksTopic == c.JobsTopic || c.TasksTopic == c.DLQTopic || c.JobsTopic == c.DLQTopic {
		return errors.New("ticks: tasks, jobs and DLQ topics must differ")
	}
	return nil
}
