// Package testkit hands tests the services they need — Kafka, PostgreSQL,
// Redis and an S3-compatible object store — and isolates each test inside
// them, so every test can run in parallel against a shared server.
//
// # Where a service comes from
//
// Each constructor tries the sources below in order and takes the first one
// that is available:
//
//	service      1. environment     2. local binary                      3. container (Docker)   4. fake (only with FakeOK)
//	Kafka        KAFKA_BROKERS      —                                    Redpanda               kfake, in process
//	PostgreSQL   DATABASE_URL       initdb + postgres (PATH or           postgres               —
//	                                /usr/lib/postgresql/*/bin)
//	Redis        REDIS_URL          redis-server (PATH)                  —                      miniredis, in process
//	Object store S3_ENDPOINT        minio (PATH or $(go env GOPATH)/bin) —                      local directory
//
// Environment variables always win: when KAFKA_BROKERS is set, NewKafka uses it
// and nothing is started. A package's TestMain may call MainWithPostgres,
// which (DATABASE_URL unset, binaries installed) starts one local PostgreSQL
// for the whole test binary and sets DATABASE_URL to it, so the package's
// tests share that server instead of starting one each. Local binaries are started per call through
// internal/localsvc, in a private temporary directory on a free port, and
// stopped when the test that asked for them ends. A container is used only when a Docker engine answers a health
// check; the check never panics and takes milliseconds when there is no engine.
// Fakes are used only when the caller passes FakeOK, because a fake is faithful
// enough for some tests but not for others (ForceFake makes a test always use
// kfake, for tests that inject faults through its control hooks).
//
// # Skip or fail
//
// When no source is available the test is skipped with the concrete reason,
// for example "testkit: no Kafka: KAFKA_BROKERS unset, no Docker engine (...),
// fake not allowed". When the environment variable CI is true the same
// message fails the test instead, so that a CI machine that lost a service
// cannot turn the suite green by skipping it. RequireReal applies the same rule
// to a test that must not run on a fake.
//
// # Isolation
//
// Every constructor returns something private to the calling test: Kafka.Topic
// creates uniquely named topics (deleted on cleanup on real brokers), Postgres
// is a fresh schema set as the connection's search_path (dropped on cleanup),
// Redis and ObjectStore carry a unique key prefix (keys and objects under it
// are deleted on cleanup on shared servers). Name builds those unique names.
//
// # Lifetimes
//
// Everything a constructor opens — clients, pools, processes, containers,
// temporary directories — is closed through t.Cleanup of the testing.TB it
// was given. The package keeps no state between calls: two calls start two
// local servers (MainWithPostgres shares one through the process
// environment, not through package state). To share one local PostgreSQL between the subtests of a test,
// call NewPostgresServer once and PostgresServer.Postgres in each subtest.
//
// # Helpers
//
// Beside the services, the package holds the small helpers tests keep
// needing: WaitFor polls a condition with a deadline; RunInBackground runs a
// service or runner for the test and fails it if the run stops on its own;
// Kafka.ReadTopic reads a topic from its start to its current end, and
// EndOffsets and Committed list a topic's end offsets and a group's
// commits; Header and Headers look up record headers; Metric sums a
// Prometheus metric family filtered by labels; ObjectStore.Store opens the
// test's object store as an objstore.Store.
//
// All functions are safe to call from parallel tests.
package testkit
