package main

import (
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// walkCommands calls fn for c and every command under it.
func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		if sub.Name() == "help" || sub.Name() == "completion" {
			continue // cobra's own
		}
		walkCommands(sub, fn)
	}
}

// Every flag used to be a persistent flag of the root, so every command's
// --help listed the Kafka, PostgreSQL, Redis and S3 settings (S3 flags on
// lag) and accepted them. Each command now lists and accepts the groups of
// the services it connects to, and only those.
func TestHelpListsOnlyTheServiceFlagsACommandUses(t *testing.T) {
	t.Parallel()
	const (
		kafka = kafkaFlags
		pg    = postgresFlags
		redis = redisFlags
		obj   = objectFlags
		none  = serviceFlags(0)
	)
	// The flags of each service group, as --help lists them.
	serviceGroupFlags := map[serviceFlags][]string{
		kafkaFlags:    {"--brokers", "--kafka-sasl-mechanism", "--kafka-sasl-user", "--kafka-tls", "--kafka-tls-ca-file"},
		postgresFlags: {"--database-url"},
		redisFlags:    {"--redis-url"},
		objectFlags:   {"--s3-endpoint", "--s3-access-key", "--s3-secret-key", "--s3-bucket", "--s3-secure", "--object-store-dir"},
	}
	want := map[string]serviceFlags{
		"sluice":                        none,
		"sluice run":                    kafka | pg | redis | obj,
		"sluice demo":                   kafka | pg | redis | obj,
		"sluice console":                kafka | pg | redis,
		"sluice topics":                 none,
		"sluice topics ensure":          kafka,
		"sluice topics list":            kafka,
		"sluice migrate":                pg,
		"sluice replay":                 kafka,
		"sluice lag":                    kafka,
		"sluice dlq":                    none,
		"sluice dlq inspect":            kafka,
		"sluice dlq redrive":            kafka,
		"sluice dlq archive":            kafka | pg,
		"sluice smap":                   none,
		"sluice smap progress":          redis,
		"sluice smap rebuild-progress":  kafka | pg | redis | obj,
		"sluice ingest":                 none,
		"sluice ingest trigger":         kafka,
		"sluice ingest status":          kafka,
		"sluice ingest bootstrap":       kafka | obj,
		"sluice version":                none,
		"sluice trades":                 none,
		"sluice trades import":          kafka,
		"sluice trades status":          kafka,
		"sluice trades score":           kafka,
		"sluice trades digest":          kafka,
		"sluice trades rebuild-digests": kafka | pg,
		"sluice trades sim":             pg | redis,
		"sluice modules":                none,
		"sluice modules refresh":        kafka | pg,
		"sluice modules status":         pg,
		"sluice modules analyze":        kafka | pg,
		"sluice modules jobs":           pg,
		"sluice modules catalog":        pg,
	}
	seen := map[string]bool{}
	walkCommands(newRootCmd(), func(c *cobra.Command) {
		path := c.CommandPath()
		seen[path] = true
		groups, ok := want[path]
		if !ok {
			t.Errorf("%s: not in this test's table: add the service groups it uses", path)
			return
		}
		args := append(strings.Fields(path)[1:], "--help")
		help, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%s --help: %v", path, err)
		}
		flagsPart := help[strings.Index(help, "Flags:"):]
		for g, names := range serviceGroupFlags {
			for _, name := range names {
				listed := strings.Contains(flagsPart, name+" ")
				if used := groups&g != 0; used != listed {
					t.Errorf("%s --help: %s listed = %v, want %v\n%s", path, name, listed, used, help)
				}
			}
		}
		if !strings.Contains(help, "--log-level") {
			t.Errorf("%s --help: no --log-level\n%s", path, help)
		}
	})
	var missing []string
	for path := range want {
		if !seen[path] {
			missing = append(missing, path)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("commands in the table but not in the tree: %v", missing)
	}
}

// A service flag on a command that does not use the service is refused
// (it used to be accepted and ignored), before anything connects; the
// command's own groups still parse.
func TestServiceFlagOfAnotherCommandIsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"lag", "--s3-endpoint", "127.0.0.1:1"},
		{"lag", "--redis-url", "redis://127.0.0.1:1/0"},
		{"migrate", "--brokers", "127.0.0.1:1"},
		{"smap", "progress", "p1", "--database-url", "postgres://u@127.0.0.1:1/db"},
		{"trades", "sim", "u1", "t1", "--brokers", "127.0.0.1:1"},
		{"version", "--brokers", "127.0.0.1:1"},
	} {
		_, err := runCLI(t, args...)
		flag := ""
		for _, a := range args {
			if strings.HasPrefix(a, "--") {
				flag = a
			}
		}
		singleLine(t, err, "unknown flag: "+flag)
	}
	// The command's own service flags are parsed and used.
	_, err := runCLI(t, "smap", "progress", "p1", "--json", "--redis-url", "redis://127.0.0.1:1/x")
	singleLine(t, err, `invalid database number: "x"`)
	_, err = runCLI(t, "dlq", "archive", "--brokers", "127.0.0.1:1", "--database-url", "")
	singleLine(t, err, "no database: set DATABASE_URL or --database-url")
}
