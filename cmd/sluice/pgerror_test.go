package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// pgCommands are the command lines that parse DATABASE_URL, one per code
// path: migrate (database/sql), dlq archive (its own pool), trades rebuild-digests
// rebuild-digests and modules status (connectPostgres), run (buildEnv).
func pgCommands(t *testing.T, k *testkit.Kafka) [][]string {
	brokers := strings.Join(k.Brokers, ",")
	dlqTopic := k.Topic(t, "silver.dlq", 1)
	return [][]string{
		{"migrate", "--status"},
		{"dlq", "archive", "--once", "--brokers", brokers, "--topic", dlqTopic},
		{"trades", "rebuild-digests", "u1", "--brokers", brokers},
		{"modules", "status", "AAPL"},
		{"run", "silver", "--brokers", brokers, "--ops-addr", ""},
	}
}

// A malformed DATABASE_URL used to be quoted in the error with only the
// passwords pgx recognises masked: a string that is no DSN at all, or
// "password = x" with spaces, showed the secret. Every command now gives
// "invalid DATABASE_URL: REASON" without any part of the string.
func TestDatabaseURLErrorHidesPassword(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cases := []struct{ url, want string }{
		{"pw-s3cret", "invalid DATABASE_URL: failed to parse as keyword/value"},
		{"host=h password = pw-s3cret port=x", "invalid DATABASE_URL: invalid port"},
		{"u:pw-s3cret@127.0.0.1:1/db", "invalid DATABASE_URL: failed to parse as keyword/value"},
		{"postgres://u:pw-s3cret%zz@127.0.0.1:1/db", "invalid DATABASE_URL: failed to parse as URL"},
		{"postgres://u:pw-s3cret@127.0.0.1:abc/db", "invalid DATABASE_URL: "},
	}
	for _, tc := range cases {
		for _, args := range pgCommands(t, k) {
			out, err := runCLI(t, append(args, "--database-url", tc.url)...)
			singleLine(t, err, tc.want)
			if strings.Contains(err.Error()+out, "s3cret") {
				t.Errorf("%v with %s: the password leaked: %v\n%s", args, tc.url, err, out)
			}
		}
	}
}

// A PostgreSQL that cannot be reached used to give, depending on the
// command, "schemas: connect to database: failed to connect to `user=…`:"
// followed by one line per address, "database: …" or "postgres at …".
// Every command now says "postgres at HOST:PORT: CAUSE" on one line.
func TestPostgresUnreachableOneLine(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	url := "postgres://u:pw-s3cret@127.0.0.1:1/db?connect_timeout=5"
	for _, args := range pgCommands(t, k) {
		out, err := runCLI(t, append(args, "--database-url", url)...)
		singleLine(t, err, "postgres at 127.0.0.1:1: dial error: dial tcp 127.0.0.1:1: connect: connection refused")
		if strings.Contains(err.Error()+out, "s3cret") {
			t.Errorf("%v: the password leaked: %v\n%s", args, err, out)
		}
	}
}

// A REDIS_URL without "://" made go-redis quote what precedes the first
// colon as the URL scheme: with "password:x@host" that is the password.
func TestRedisURLNotAURLHidesPassword(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	brokers := strings.Join(k.Brokers, ",")
	for _, url := range []string{"pw-s3cret:x@127.0.0.1:1/0", "pw-s3cret"} {
		for _, args := range [][]string{
			{"smap", "progress", "p1", "--json"},
			{"run", "ticks", "--brokers", brokers, "--ops-addr", ""},
			{"trades", "sim", "u1", "t1", "--database-url", "postgres://u@127.0.0.1:1/db"},
		} {
			out, err := runCLI(t, append(args, "--redis-url", url)...)
			if err == nil || !strings.Contains(err.Error(), "invalid REDIS_URL") && !strings.Contains(err.Error(), "postgres at") {
				t.Errorf("%v with %s: error %v, want invalid REDIS_URL", args, url, err)
			}
			if err != nil && strings.Contains(strings.ToLower(err.Error()+out), "s3cret") {
				t.Errorf("%v with %s: the password leaked: %v\n%s", args, url, err, out)
			}
		}
	}
}
