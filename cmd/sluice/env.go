package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/opshttp"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// needs says which services a command connects to.
type needs struct {
	db, redis, objects bool
}

// connectTimeout bounds every first contact with a service (Kafka,
// PostgreSQL, Redis, S3) so that an unreachable one gives a one-line error
// instead of a hang.
const connectTimeout = 10 * time.Second

// buildEnv connects to the services a command needs and returns the
// pipeline environment and a function that closes everything.
func (g *globalConfig) buildEnv(ctx context.Context, n needs) (pipelines.Env, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	kopts, err := kafkaOpts(ctx, g)
	if err != nil {
		return pipelines.Env{}, closeAll, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log := g.logger()
	env := pipelines.Env{Kafka: kopts, Registerer: reg, Logger: log, Ops: opshttp.New(reg, log)}

	if n.db {
		if err := g.needDatabase(); err != nil {
			return env, closeAll, err
		}
		pool, err := connectPostgres(ctx, g.DatabaseURL)
		if err != nil {
			return env, closeAll, err
		}
		closers = append(closers, pool.Close)
		env.DB = pool
	}
	if n.redis {
		rc, err := connectRedis(ctx, g.RedisURL)
		if err != nil {
			return env, closeAll, err
		}
		closers = append(closers, func() { _ = rc.Close() })
		env.Redis = rc
	}
	if n.objects {
		store, err := g.objectStore(ctx)
		if err != nil {
			return env, closeAll, err
		}
		env.Objects = store
	}
	return env, closeAll, nil
}

// connectRedis opens a client on REDIS_URL and checks it answers PING;
// the client is closed on error.
func connectRedis(ctx context.Context, url string) (*redis.Client, error) {
	if url == "" {
		return nil, fmt.Errorf("no Redis: set REDIS_URL or --redis-url")
	}
	opt, err := parseRedisURL(url)
	if err != nil {
		return nil, err
	}
	rc := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := rc.Ping(pctx).Err(); err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("redis at %s: %w", opt.Addr, err)
	}
	return rc, nil
}

// parseRedisURL parses REDIS_URL. Its errors never contain the password:
// url.Parse quotes the whole URL in its errors, so a URL that fails to parse
// is parsed again with the password replaced, and only that error is shown.
func parseRedisURL(raw string) (*redis.Options, error) {
	opt, err := redis.ParseURL(raw)
	if err == nil {
		return opt, nil
	}
	if !strings.Contains(raw, "://") {
		// url.Parse would take what precedes the first colon (maybe a
		// password) for the scheme, and go-redis quotes the scheme.
		return nil, errors.New("invalid REDIS_URL: not a URL (want redis://[user:password@]host:port/db)")
	}
	redacted, hidden := redactURLPassword(raw)
	if !hidden {
		return nil, fmt.Errorf("invalid REDIS_URL: %w", err)
	}
	if _, rerr := redis.ParseURL(redacted); rerr != nil {
		return nil, fmt.Errorf("invalid REDIS_URL: %w", rerr)
	}
	return nil, fmt.Errorf("invalid REDIS_URL %s: the user or password is not valid in a URL (percent-encode special characters)", redacted)
}

// redactURLPassword replaces the password (or, without a colon, the whole
// user info) of a URL written scheme://user:password@host... with "xxxxx",
// working on the text so that it also works on URLs that do not parse. It
// reports whether there was anything to hide.
func redactURLPassword(raw string) (string, bool) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw, false
	}
	start := i + len("://")
	at := strings.LastIndex(raw[start:], "@")
	if at < 0 {
		return raw, false
	}
	at += start
	from := start
	if c := strings.Index(raw[start:at], ":"); c >= 0 {
		from = start + c + 1
	}
	if from == at {
		return raw, false
	}
	return raw[:from] + "xxxxx" + raw[at:], true
}

// postgresPoolConfig parses url and sets sluice's connection settings:
// connectTimeout and the dialer of postgresDialer.
func postgresPoolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, invalidDatabaseURL(err)
	}
	cfg.ConnConfig.ConnectTimeout = connectTimeout
	cfg.ConnConfig.DialFunc = postgresDialer().DialContext
	return cfg, nil
}

// connectPostgres opens a pool and checks it answers.
func connectPostgres(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := postgresPoolConfig(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, postgresError(cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, postgresError(cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// objectStore returns S3/MinIO when S3_ENDPOINT is set, else the local
// directory store.
func (g *globalConfig) objectStore(ctx context.Context) (objstore.Store, error) {
	if g.S3Endpoint == "" {
		st, err := objstore.NewDir(g.ObjectStoreDir)
		if err != nil {
			return nil, fmt.Errorf("object store directory %s: %w", g.ObjectStoreDir, err)
		}
		return st, nil
	}
	sctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	st, err := objstore.NewS3(sctx, objstore.S3Config{Endpoint: g.S3Endpoint, AccessKey: g.S3AccessKey, SecretKey: g.S3SecretKey, Bucket: g.S3Bucket, Secure: g.S3Secure})
	if err != nil {
		return nil, fmt.Errorf("object store at %s: %w", g.S3Endpoint, err)
	}
	return st, nil
}
