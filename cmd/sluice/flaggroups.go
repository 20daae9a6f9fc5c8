package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// serviceFlags is a set of the service flag groups a command uses; each
// command declares its own with withServiceFlags, so that its --help lists
// only the settings it reads (no S3 flags on lag).
type serviceFlags uint8

const (
	// kafkaFlags: --brokers and the --kafka-* SASL/TLS settings.
	kafkaFlags serviceFlags = 1 << iota
	// postgresFlags: --database-url.
	postgresFlags
	// redisFlags: --redis-url.
	redisFlags
	// objectFlags: the --s3-* settings and --object-store-dir.
	objectFlags

	allServiceFlags = kafkaFlags | postgresFlags | redisFlags | objectFlags
)

// withServiceFlags adds the flags of groups to cmd and returns cmd. Every
// command's flags write the same fields of g, whose values come from the
// environment (see newRootCmd); only the running command's flags are
// parsed. The settings of a group a command does not declare keep their
// environment value.
func (g *globalConfig) withServiceFlags(cmd *cobra.Command, groups serviceFlags) *cobra.Command {
	f := cmd.Flags()
	if groups&kafkaFlags != 0 {
		f.StringVar(&g.brokers, "brokers", g.brokers, "Kafka seed brokers, comma separated (env KAFKA_BROKERS)")
		f.StringVar(&g.Kafka.SASLMechanism, "kafka-sasl-mechanism", g.Kafka.SASLMechanism, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env KAFKA_SASL_MECHANISM)")
		f.StringVar(&g.Kafka.SASLUser, "kafka-sasl-user", g.Kafka.SASLUser, "SASL user (env KAFKA_SASL_USER)")
		f.BoolVar(&g.Kafka.TLS, "kafka-tls", g.Kafka.TLS, "connect to Kafka with TLS (env KAFKA_TLS)")
		f.StringVar(&g.Kafka.TLSCAFile, "kafka-tls-ca-file", g.Kafka.TLSCAFile, "CA bundle for Kafka TLS; implies --kafka-tls (env KAFKA_TLS_CA_FILE)")
	}
	if groups&postgresFlags != 0 {
		secretStringVar(f, &g.DatabaseURL, "database-url", "PostgreSQL URL (env DATABASE_URL)")
	}
	if groups&redisFlags != 0 {
		secretStringVar(f, &g.RedisURL, "redis-url", "Redis URL (env REDIS_URL)")
	}
	if groups&objectFlags != 0 {
		f.StringVar(&g.S3Endpoint, "s3-endpoint", g.S3Endpoint, "S3/MinIO endpoint host:port; empty uses OBJECT_STORE_DIR (env S3_ENDPOINT)")
		f.StringVar(&g.S3AccessKey, "s3-access-key", g.S3AccessKey, "S3 access key (env S3_ACCESS_KEY)")
		secretStringVar(f, &g.S3SecretKey, "s3-secret-key", "S3 secret key (env S3_SECRET_KEY)")
		f.StringVar(&g.S3Bucket, "s3-bucket", g.S3Bucket, "S3 bucket (env S3_BUCKET)")
		f.BoolVar(&g.S3Secure, "s3-secure", g.S3Secure, "use HTTPS for S3 (env S3_SECURE)")
		f.StringVar(&g.ObjectStoreDir, "object-store-dir", g.ObjectStoreDir, "local object store directory when no S3 endpoint is set (env OBJECT_STORE_DIR)")
	}
	return cmd
}

// secretStringVar adds a string flag on p whose value may hold a password:
// it has no default, since --help prints defaults (the environment's value
// is filled in by secretsFromEnv when the flag is not given), and p keeps
// the value it had.
func secretStringVar(f *pflag.FlagSet, p *string, name, usage string) {
	v := *p
	f.StringVar(p, name, "", usage)
	*p = v
}
