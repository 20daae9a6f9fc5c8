// Command watermill is the Watermill peer of the silver pipeline for
// `make bench-silver` (variant w of bench/silverbench): the application a
// Watermill user would write for bronze → ta_silver / sa_silver.
//
// A Watermill router (v1.5.1) with a watermill-kafka v3 subscriber (a
// consumer group) and one handler per message, as the library is meant to
// be used (it has no batch handler):
//
//   - the handler decodes the envelope and applies the silver rules with
//     sluice's own silver.Decode and validator, so that the rules are the
//     same code and only the framework differs;
//   - a valid record is written with one single-row INSERT … ON CONFLICT
//     DO UPDATE (the statements are passed by the harness: the seed port's
//     per-row upsert with the silver sink's SET clause) before the message
//     is acked, so its offset is committed (every second, sarama's auto
//     commit) only after its row is durable;
//   - an invalid record is returned as an error carrying the dead-letter
//     reason and rule in the message metadata; Watermill's poison queue
//     middleware publishes the message to the DLQ topic (the metadata
//     become Kafka headers: dlq.reason, dlq.rule, and the middleware's
//     own) and acks it. Any other error nacks the message: it is
//     redelivered.
//
// It lives in its own Go module so that Watermill and sarama do not become
// dependencies of sluice's main module. It runs until SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/stages"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "watermill peer:", err)
		os.Exit(1)
	}
}

type flags struct {
	brokers, databaseURL, group, topic, dlqTopic string
	taUpsert, saUpsert                           string
}

func run() error {
	var f flags
	fs := flag.NewFlagSet("watermill", flag.ContinueOnError)
	fs.StringVar(&f.brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "Kafka seed brokers, comma-separated")
	fs.StringVar(&f.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL; put the schema in search_path")
	fs.StringVar(&f.group, "group", "silver-watermill", "consumer group")
	fs.StringVar(&f.topic, "topic", "bronze.records", "bronze topic")
	fs.StringVar(&f.dlqTopic, "dlq-topic", "bronze.dlq", "DLQ (poison queue) topic")
	fs.StringVar(&f.taUpsert, "ta-upsert", "", "single-row upsert into ta_silver, parameters in silver.TATable().Values order")
	fs.StringVar(&f.saUpsert, "sa-upsert", "", "single-row upsert into sa_silver, parameters in silver.SATable().Values order")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if f.brokers == "" || f.databaseURL == "" || f.taUpsert == "" || f.saUpsert == "" {
		return errors.New("--brokers, --database-url, --ta-upsert and --sa-upsert are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, f.databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}

	logger := watermill.NewStdLogger(false, false)
	brokers := strings.Split(f.brokers, ",")
	subCfg := kafka.DefaultSaramaSubscriberConfig()
	subCfg.Version = sarama.V3_6_0_0 // the default (1.0) speaks protocol versions Kafka 4 no longer accepts
	subCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers: brokers, Unmarshaler: kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: subCfg, ConsumerGroup: f.group,
	}, logger)
	if err != nil {
		return fmt.Errorf("kafka subscriber: %w", err)
	}
	pubCfg := kafka.DefaultSaramaSyncPublisherConfig()
	pubCfg.Version = sarama.V3_6_0_0
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: brokers, Marshaler: kafka.DefaultMarshaler{}, OverwriteSaramaConfig: pubCfg,
	}, logger)
	if err != nil {
		return fmt.Errorf("kafka publisher: %w", err)
	}
	defer pub.Close()

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, logger)
	if err != nil {
		return err
	}
	poison, err := middleware.PoisonQueueWithFilter(pub, f.dlqTopic, isDeadLetter)
	if err != nil {
		return err
	}
	router.AddMiddleware(poison)
	h := &handler{v: silver.NewValidator(), db: pool, taSQL: f.taUpsert, saSQL: f.saUpsert,
		taValues: silver.TATable().Values, saValues: silver.SATable().Values}
	router.AddConsumerHandler("silver", f.topic, sub, h.handle)
	return router.Run(ctx)
}

// handler validates one bronze message and upserts its row. Safe for
// concurrent use (the router runs one handler call per partition at a time).
type handler struct {
	v            *silver.Validator
	db           *pgxpool.Pool
	taSQL, saSQL string
	taValues     func(silver.TARow) []any
	saValues     func(silver.SARow) []any
}

// deadLetter is a record the rules refuse: it goes to the poison queue.
type deadLetter struct{ err error }

func (d deadLetter) Error() string { return d.err.Error() }
func (d deadLetter) Unwrap() error { return d.err }

func isDeadLetter(err error) bool {
	var d deadLetter
	return errors.As(err, &d)
}

func (h *handler) handle(msg *message.Message) error {
	ts, _ := kafka.MessageTimestampFromCtx(msg.Context())
	env, err := silver.Decode(nil, msg.Payload)
	var row silver.Row
	if err == nil {
		row, err = h.v.Transform(env, ts)
	}
	if err != nil {
		c := stages.Classify(err)
		if c.Kind != stages.KindDeadLetter {
			return err
		}
		msg.Metadata.Set(stages.HeaderReason, string(c.Reason))
		if c.Rule != "" {
			msg.Metadata.Set(stages.HeaderRule, c.Rule)
		}
		return deadLetter{err}
	}
	switch {
	case row.TA != nil:
		_, err = h.db.Exec(msg.Context(), h.taSQL, h.taValues(*row.TA)...)
	case row.SA != nil:
		_, err = h.db.Exec(msg.Context(), h.saSQL, h.saValues(*row.SA)...)
	}
	if err != nil {
		return fmt.Errorf("upsert: %w", err)
	}
	return nil
}
