package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/console"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/registry"
)

// consoleToken is the console's operator token (env SLUICE_CONSOLE_TOKEN;
// never a flag, so that it does not show in ps or shell history).
func consoleToken() string { return strings.TrimSpace(os.Getenv(console.TokenEnv)) }

func newConsoleCmd(g *globalConfig) *cobra.Command {
	var (
		addr        string
		sampleEvery time.Duration
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: consumer groups and lag, dead letters (with redrive), jobs",
		Long: `console serves a web UI (default http://127.0.0.1:8080/) over the pipelines
sluice declares: every consumer group with its members, assigned partitions,
lag per partition, records/s and a lag chart of the last minutes (sampled by
the console); the control flags; the dead-letter topics (counts per reason ×
rule, the records with headers and value, the filters of dlq inspect, and a
redrive of a selection with a dry-run preview); ticks jobs and smap projects.
Redis (REDIS_URL) and PostgreSQL (DATABASE_URL) are optional: the sections
that need them say so.

The console is read-only unless SLUICE_CONSOLE_TOKEN is set; a redrive then
asks for that token and checks the page's CSRF token. It listens on loopback
unless --addr says otherwise, and refuses a non-loopback address without a
token. Reference: docs/console.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := console.CheckAddr(addr, consoleToken()); err != nil {
				return err
			}
			if sampleEvery <= 0 {
				return fmt.Errorf("invalid --sample-every %v (want > 0)", sampleEvery)
			}
			env, closeEnv, err := g.buildEnv(cmd.Context(), needs{db: g.DatabaseURL != "", redis: g.RedisURL != ""})
			defer closeEnv()
			if err != nil {
				return err
			}
			cfg := consoleConfig(env, registry.All(registry.Settings{}))
			cfg.SampleEvery = sampleEvery
			return serveConsole(cmd.Context(), cfg, addr, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&addr, "addr", console.DefaultAddr, "listen address; a non-loopback one needs "+console.TokenEnv)
	cmd.Flags().DurationVar(&sampleEvery, "sample-every", 5*time.Second, "how often the console samples the lag of every group (chart and records/s)")
	return g.withServiceFlags(cmd, kafkaFlags|postgresFlags|redisFlags)
}

// consoleConfig is the console over env's services and the pipelines of
// specs, with the token of the environment.
func consoleConfig(env pipelines.Env, specs []pipelines.Spec) console.Config {
	cfg := console.Config{Kafka: env.Kafka, Pipelines: specs, Token: consoleToken(), Redis: env.Redis, Logger: env.Logger}
	if env.DB != nil {
		cfg.Postgres = env.DB
	}
	return cfg
}

// serveConsole serves the console on addr until ctx ends, printing its URL
// to out once it listens.
func serveConsole(ctx context.Context, cfg console.Config, addr string, out io.Writer) error {
	c, ln, err := listenConsole(cfg, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintln(out, consoleLine(ln.Addr(), cfg.Token != ""))
	return c.Serve(ctx, ln)
}

// listenConsole builds the console of cfg and binds addr; close the
// console when done (Serve closes the listener).
func listenConsole(cfg console.Config, addr string) (*console.Console, net.Listener, error) {
	ln, err := console.Listen(addr, cfg.Token)
	if err != nil {
		return nil, nil, err
	}
	c, err := console.New(cfg)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return c, ln, nil
}

// consoleLine is the line that tells where the console is.
func consoleLine(a net.Addr, token bool) string {
	mode := "read-only: set " + console.TokenEnv + " to allow redrives"
	if token {
		mode = "redrives ask for the token in " + console.TokenEnv
	}
	return fmt.Sprintf("console: http://%s/ (%s)", dialAddr(a), mode)
}
