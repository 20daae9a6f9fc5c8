package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/modules"
)

// errSluiceNotBuilt is never returned by this hook.
var errSluiceNotBuilt = errors.New("unused")

// startSluice is the hook of variant (ii): it starts the modules services
// in this process — group <groupPrefix>modules-refresh reading
// in.refreshTopic with in.source as its upstream and no rate limiter (the
// upstream's slots are the only bound, as for the seed variant), and group
// <groupPrefix>modules-mirror applying in.stateTopic to in.db — waits
// until both are ready (at most a minute), and returns a function that
// stops them and waits for them.
func startSluice(ctx context.Context, in sluiceInputs) (stop func() error, err error) {
	env := pipelines.Env{Kafka: in.kafka, DB: in.db, Registerer: in.reg, Logger: slog.New(slog.DiscardHandler)}
	cfg := modules.Config{
		RefreshTopic: in.refreshTopic, StateTopic: in.stateTopic, DLQTopic: in.dlqTopic,
		RefreshGroup: in.groupPrefix + "modules-refresh", MirrorGroup: in.groupPrefix + "modules-mirror",
		Source: in.source, RateLimit: modules.RateLimitConfig{Disabled: true},
	}
	svcs, err := modules.Services(env, cfg)
	if err != nil {
		return nil, fmt.Errorf("modules services: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(svcs))
	for _, s := range svcs {
		go func() { done <- s.Run(runCtx) }()
	}
	pending := len(svcs) // services whose Run has not returned
	stop = func() error {
		cancel()
		var errs []error
		for ; pending > 0; pending-- {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ready := true
		for _, s := range svcs {
			ready = ready && s.Ready()
		}
		if ready {
			return stop, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(errors.New("modules services not ready after a minute"), stop())
		}
		select {
		case err := <-done:
			pending--
			return nil, errors.Join(fmt.Errorf("a modules service stopped: %w", err), stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
