package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/internal/kconf"
)

// globalConfig holds the settings shared by the subcommands. Fields are
// filled from the environment, then overridden by the flags of the running
// command (--log-level on every command, the service flags on the commands
// that use them: withServiceFlags).
type globalConfig struct {
	Kafka          kconf.Config
	brokers        string // raw --brokers / KAFKA_BROKERS
	DatabaseURL    string
	RedisURL       string
	S3Endpoint     string
	S3AccessKey    string
	S3SecretKey    string
	S3Bucket       string
	S3Secure       bool
	ObjectStoreDir string
	LogLevel       string
	// ownsProcess: the commands run in the sluice binary's own process
	// (newProcessRootCmd), not in-process in a test, and may set
	// process-wide settings (the Go soft memory limit of sluice run).
	ownsProcess bool
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func newRootCmd() *cobra.Command { return newRootCmdFor(false) }

// newProcessRootCmd is the root command of the sluice binary's own process.
func newProcessRootCmd() *cobra.Command { return newRootCmdFor(true) }

func newRootCmdFor(ownsProcess bool) *cobra.Command {
	// The environment's values; a command's flags override those it declares.
	g := &globalConfig{
		ownsProcess:    ownsProcess,
		Kafka:          kconf.FromEnv(),
		brokers:        os.Getenv("KAFKA_BROKERS"),
		S3Endpoint:     os.Getenv("S3_ENDPOINT"),
		S3AccessKey:    os.Getenv("S3_ACCESS_KEY"),
		S3Bucket:       envOr("S3_BUCKET", "sluice"),
		S3Secure:       strings.EqualFold(os.Getenv("S3_SECURE"), "true"),
		ObjectStoreDir: envOr("OBJECT_STORE_DIR", ".sluice/objects"),
	}
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Stream-processing pipelines over Kafka",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			g.secretsFromEnv(cmd)
			if err := g.boolsFromEnv(cmd); err != nil {
				return err
			}
			if err := g.finish(); err != nil {
				return err
			}
			redis.SetLogger(goRedisLogger{g.logger()})
			return nil
		},
	}
	// --log-level is the one flag of every command; the service flags are
	// added by each command that uses them (withServiceFlags).
	root.PersistentFlags().StringVar(&g.LogLevel, "log-level", envOr("LOG_LEVEL", "info"), "log level: debug, info, warn, error (env LOG_LEVEL)")
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(subcommands(g)...)
	rejectUnknownSubcommands(root)
	setExamples(root)
	return root
}

// rejectUnknownSubcommands makes every command group (a command with
// subcommands and no action of its own) fail on an unknown subcommand
// instead of printing its help and exiting 0.
func rejectUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		rejectUnknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Run != nil || c.RunE != nil {
		return
	}
	// Args run before any PreRun, so a typo is reported before the
	// environment is checked.
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		return unknownCommandError(cmd, args[0])
	}
	c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
}

// unknownCommandError is the one form of every "unknown command" error:
// `unknown command "X" for "sluice dlq"; did you mean inspect? (see sluice dlq --help)`,
// the suggestion only when cobra has one.
func unknownCommandError(cmd *cobra.Command, name string) error {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only by its own lookup
	}
	hint := ""
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		hint = "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return fmt.Errorf("unknown command %q for %q%s (see %s --help)", name, cmd.CommandPath(), hint, cmd.CommandPath())
}

// secretsFromEnv fills the settings whose values may hold a password from
// the environment when their flag was not given (a flag given empty still
// means "none"). They are not flag defaults because --help prints those.
func (g *globalConfig) secretsFromEnv(cmd *cobra.Command) {
	for _, s := range []struct {
		flag, env string
		dst       *string
	}{
		{"database-url", "DATABASE_URL", &g.DatabaseURL},
		{"redis-url", "REDIS_URL", &g.RedisURL},
		{"s3-secret-key", "S3_SECRET_KEY", &g.S3SecretKey},
	} {
		if f := cmd.Flags().Lookup(s.flag); f == nil || !f.Changed {
			*s.dst = os.Getenv(s.env)
		}
	}
}

// boolsFromEnv sets the boolean settings from the environment when their
// flag was not given, parsed as the flag parses them (1, t, true, TRUE, 0,
// f, false…); a value that is not a boolean is an error naming the variable.
func (g *globalConfig) boolsFromEnv(cmd *cobra.Command) error {
	for _, b := range []struct {
		flag, env string
		dst       *bool
	}{
		{"kafka-tls", "KAFKA_TLS", &g.Kafka.TLS},
		{"s3-secure", "S3_SECURE", &g.S3Secure},
	} {
		if f := cmd.Flags().Lookup(b.flag); f != nil && f.Changed {
			continue
		}
		v := os.Getenv(b.env)
		if v == "" {
			continue
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("invalid %s=%q (want true or false)", b.env, v)
		}
		*b.dst = on
	}
	return nil
}

// finish validates the global settings after flags were parsed.
func (g *globalConfig) finish() error {
	g.Kafka.Brokers = kconf.SplitBrokers(g.brokers)
	switch strings.ToLower(g.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("invalid --log-level %q (want debug, info, warn or error)", g.LogLevel)
	}
	return nil
}

// needKafka validates the Kafka settings for commands that talk to Kafka.
func (g *globalConfig) needKafka() error {
	if err := g.Kafka.Validate(); err != nil {
		return err
	}
	return nil
}

// needDatabase validates DATABASE_URL for commands that talk to PostgreSQL.
func (g *globalConfig) needDatabase() error {
	if g.DatabaseURL == "" {
		return errors.New("no database: set DATABASE_URL or --database-url")
	}
	return nil
}

// logger returns a JSON slog logger at the configured level.
func (g *globalConfig) logger() *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(g.LogLevel))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}
