package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages/dlq"
	"github.com/sluicehq/sluice/topics"
)

// dlqValuePreview is how many bytes of a value `dlq inspect` prints without
// --json.
const dlqValuePreview = 200

func newDLQCmd(g *globalConfig) *cobra.Command {
	return commandGroup("dlq", "Inspect, re-drive and archive dead-letter topics",
		newDLQInspectCmd(g), newDLQRedriveCmd(g), newDLQArchiveCmd(g))
}

// dlqFilterFlags are the record filters shared by inspect and redrive.
type dlqFilterFlags struct {
	changed        func(flag string) bool // reports whether a flag was set
	reasons, rules []string
	since, until   string
	sourceTopic    string
}

func (ff *dlqFilterFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	ff.changed = f.Changed
	f.StringSliceVar(&ff.reasons, "reason", nil, "only records with this dlq.reason; repeat or comma-separate for several ('' selects records without one)")
	f.StringSliceVar(&ff.rules, "rule", nil, "only records with this dlq.rule id; repeat or comma-separate for several ('' selects records without one)")
	f.StringVar(&ff.since, "since", "", "only records that failed at or after this time: RFC 3339 or a duration ago like -1h")
	f.StringVar(&ff.until, "until", "", "only records that failed before this time: RFC 3339 or a duration ago")
	f.StringVar(&ff.sourceTopic, "source-topic", "", "only records that came from this topic")
}

// filter builds the filter the flags describe. An empty --rule= (or
// --reason=) selects the records without a rule (reason): the flag parser turns an
// empty value into an empty list, which would otherwise select every
// record, a surprise for a redrive.
// scan checks what inspect and redrive share — the filter flags, then
// their own flag (bad reports badErr), --topic and --timeout — and returns
// the filter, the Kafka options and a context bounded by timeout (cancel
// it). The first error found is returned alone.
func (ff *dlqFilterFlags) scan(cmd *cobra.Command, g *globalConfig, topic string, timeout time.Duration, bad bool, badErr error) (dlq.Filter, []kgo.Opt, context.Context, context.CancelFunc, error) {
	f, err := ff.filter(time.Now())
	switch {
	case err != nil:
	case bad:
		err = badErr
	case topic == "":
		err = errors.New("empty --topic")
	default:
		err = checkTimeout(timeout)
	}
	if err != nil {
		return dlq.Filter{}, nil, nil, nil, err
	}
	opts, err := kafkaOpts(cmd.Context(), g)
	if err != nil {
		return dlq.Filter{}, nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	return f, opts, ctx, cancel, nil
}

func (ff *dlqFilterFlags) filter(now time.Time) (dlq.Filter, error) {
	changed := func(flag string) bool { return ff.changed != nil && ff.changed(flag) }
	return dlq.FilterArgs{Reasons: ff.reasons, Rules: ff.rules, ReasonsGiven: changed("reason"), RulesGiven: changed("rule"),
		Since: ff.since, Until: ff.until, SourceTopic: ff.sourceTopic}.Filter(now, "--")
}

func newDLQInspectCmd(g *globalConfig) *cobra.Command {
	var (
		topic   string
		ff      dlqFilterFlags
		limit   int
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print the records of a DLQ topic with their failure headers",
		Long: `inspect reads the DLQ topic from its start up to its current end and prints
every record that matches the filters: coordinates, key, every header and
the value (cut at 200 bytes; --json prints one complete JSON object per
line instead: valid UTF-8 JSON whatever the record holds, the value as JSON,
text or base64 as its "value_encoding" says, a key or header that is not
UTF-8 in base64). It joins no consumer group and commits nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, opts, ctx, cancel, err := ff.scan(cmd, g, topic, timeout, limit < 0, fmt.Errorf("invalid --limit %d (want ≥ 0)", limit))
			if err != nil {
				return err
			}
			defer cancel()
			out := cmd.OutOrStdout()
			n := 0
			err = dlq.Inspect(ctx, opts, topic, f, limit, func(r dlq.Record) error {
				n++
				if asJSON {
					return writeDLQJSON(out, r)
				}
				return writeDLQText(out, r)
			})
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(out, "%d record(s)", n)
				if limit > 0 && n == limit {
					fmt.Fprintf(out, " (limit reached; --limit 0 prints all)")
				}
				fmt.Fprintln(out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", topics.BronzeDLQ, "DLQ topic")
	ff.register(cmd)
	f.IntVar(&limit, "limit", 100, "print at most this many records (0: all)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per record, value complete")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "time limit for the operation once connected")
	return g.withServiceFlags(cmd, kafkaFlags)
}

func writeDLQText(w io.Writer, r dlq.Record) error {
	fmt.Fprintf(w, "%s[%d]@%d  %s  key=%q\n", r.Topic, r.Partition, r.Offset, r.Timestamp.UTC().Format(time.RFC3339), r.Key)
	for _, h := range r.Headers {
		fmt.Fprintf(w, "  %s: %s\n", h.Key, h.Value)
	}
	v := r.Value
	suffix := ""
	if len(v) > dlqValuePreview {
		cut := dlqValuePreview
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v, suffix = v[:cut], fmt.Sprintf(" … (%d bytes)", len(r.Value))
	}
	_, err := fmt.Fprintf(w, "  value: %s%s\n\n", v, suffix)
	return err
}

// dlqJSON is the --json form of a DLQ record: one line of valid UTF-8
// JSON whatever the record's bytes. The key, the value and every header
// give back the record's exact bytes: a key or header that is not UTF-8 is
// base64 with its *_encoding "base64"; the value's encoding is always named
// (dlqValueJSON, dlqValueText or dlqValueBase64). The fields read from the
// dlq.* headers (reason, rule, error …) are for reading: bytes that are not
// UTF-8 show as U+FFFD there, exactly in headers.
type dlqJSON struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Timestamp is absent when the record's timestamp is outside years
	// 0–9999 (RFC 3339 cannot write it); TimestampMs is always there.
	Timestamp       *time.Time      `json:"timestamp,omitempty"`
	TimestampMs     int64           `json:"timestamp_ms"`
	Key             string          `json:"key"`
	KeyEncoding     string          `json:"key_encoding,omitempty"`
	Reason          string          `json:"reason"`
	Rule            string          `json:"rule"`
	Error           string          `json:"error"`
	Stage           string          `json:"stage"`
	SourceTopic     string          `json:"source_topic,omitempty"`
	SourcePartition int32           `json:"source_partition"`
	SourceOffset    int64           `json:"source_offset"`
	Attempts        int             `json:"attempts"`
	FailedAt        *time.Time      `json:"failed_at,omitempty"`
	RedriveCount    int             `json:"redrive_count"`
	Headers         []dlqJSONHeader `json:"headers"`
	// Value is the record's value as ValueEncoding says.
	Value         json.RawMessage `json:"value"`
	ValueEncoding string          `json:"value_encoding"`
}

// The encodings of dlqJSON.Value.
const (
	// dlqValueJSON: the value is JSON text in UTF-8 without lone surrogate
	// escapes, written as is (the bytes between the field's colon and the
	// next comma are the record's value).
	dlqValueJSON = "json"
	// dlqValueText: the value is UTF-8 but not such JSON (or not compact);
	// it is a JSON string.
	dlqValueText = "text"
	// dlqValueBase64: the value is not UTF-8; it is a string of standard
	// base64.
	dlqValueBase64 = "base64"
)

type dlqJSONHeader struct {
	Key           string `json:"key"`
	KeyEncoding   string `json:"key_encoding,omitempty"`
	Value         string `json:"value"`
	ValueEncoding string `json:"value_encoding,omitempty"`
}

// utf8OrBase64 is b as a string when it is UTF-8, else its base64 and the
// encoding name "base64".
func utf8OrBase64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), dlqValueBase64
}

// jsonTime is t in UTC when JSON can carry it (years 0–9999), else nil.
func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	if t.Year() < 0 || t.Year() > 9999 {
		return nil
	}
	return &t
}

// dlqValue returns v encoded for dlqJSON.Value and the encoding's name.
func dlqValue(v []byte) (json.RawMessage, string) {
	switch {
	case !utf8.Valid(v):
		s, _ := json.Marshal(base64.StdEncoding.EncodeToString(v))
		return s, dlqValueBase64
	case json.Valid(v) && !hasLoneSurrogate(v) && isCompact(v):
		return v, dlqValueJSON
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(string(v)) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), dlqValueText
}

// isCompact reports whether the JSON text v has no white space outside
// strings: the encoder would compact it, changing its bytes.
func isCompact(v []byte) bool {
	var b bytes.Buffer
	return json.Compact(&b, v) == nil && bytes.Equal(b.Bytes(), v)
}

// hasLoneSurrogate reports whether the valid JSON text v has a \u escape of
// a UTF-16 surrogate that is not half of a high-low pair. json.Valid
// accepts them, but they name no character: decoders replace them.
func hasLoneSurrogate(v []byte) bool {
	in := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			if v[i+1] != 'u' {
				i++ // the escaped character
				continue
			}
			r := hex4(v[i+2 : i+6])
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true // low half first
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(v) || v[i+1] != '\\' || v[i+2] != 'u' {
					return true
				}
				if lo := hex4(v[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 6
			}
		}
	}
	return false
}

// hex4 is the value of four hexadecimal digits (valid JSON guarantees them).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

func writeDLQJSON(w io.Writer, r dlq.Record) error {
	j := dlqJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Timestamp: jsonTime(r.Timestamp), TimestampMs: r.Timestamp.UnixMilli(),
		Reason: r.Reason, Rule: r.Rule, Error: r.Error, Stage: r.Stage, SourceTopic: r.SourceTopic,
		SourcePartition: r.SourcePartition, SourceOffset: r.SourceOffset, Attempts: r.Attempts, RedriveCount: r.RedriveCount,
		FailedAt: jsonTime(r.FailedAt), Headers: []dlqJSONHeader{}}
	j.Key, j.KeyEncoding = utf8OrBase64(r.Key)
	for _, h := range r.Headers {
		var jh dlqJSONHeader
		jh.Key, jh.KeyEncoding = utf8OrBase64([]byte(h.Key))
		jh.Value, jh.ValueEncoding = utf8OrBase64(h.Value)
		j.Headers = append(j.Headers, jh)
	}
	j.Value, j.ValueEncoding = dlqValue(r.Value)
	// Without HTML escaping the encoder leaves a JSON value's bytes as they
	// are (it would turn < > & into \u escapes).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(j); err != nil {
		return fmt.Errorf("encode record %s[%d]@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func newDLQRedriveCmd(g *globalConfig) *cobra.Command {
	var (
		topic       string
		ff          dlqFilterFlags
		dryRun, all bool
		maxRedrives int
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Re-publish DLQ records to the topic they came from",
		Long: `redrive re-publishes the DLQ records that match the filters to their
dlq.source.topic (and source partition) with the original key and value,
without the dlq.* headers except dlq.redrive_count, incremented. Records
whose dlq.redrive_count reached --max-redrives (they were re-driven and
failed again that many times) are refused: this loop guard bounds how often
a record goes round the DLQ, not how often one DLQ record is re-sent.
--dry-run lists what would be sent and sends nothing. Without any filter
redrive refuses to send unless --all says to re-send the whole topic.

Kafka topics are append-only: re-driven records stay in the DLQ with their
count unchanged, and running the same redrive again sends them again. The command prints the --since
value that limits a later redrive to records that failed after this one
started (from the start of that second: dlq.failed_at is written to the
second).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, opts, ctx, cancel, err := ff.scan(cmd, g, topic, timeout, maxRedrives < 1, fmt.Errorf("invalid --max-redrives %d (want ≥ 1)", maxRedrives))
			if err != nil {
				return err
			}
			defer cancel()
			if !dryRun && !all && f.Empty() {
				return fmt.Errorf("no filter: this would re-send every record of %s; narrow it with --reason, --rule, --since, --until or --source-topic (see them first with --dry-run), or give --all", topic)
			}
			out := cmd.OutOrStdout()
			req := dlq.RedriveRequest{DLQTopic: topic, Filter: f, DryRun: dryRun, MaxRedrives: maxRedrives}
			if dryRun {
				req.Each = func(r dlq.Record, d dlq.Decision) {
					fmt.Fprintf(out, "%-10s %s[%d]@%d key=%q reason=%s rule=%s -> %s[%d] (redrives %d)\n",
						d, r.Topic, r.Partition, r.Offset, r.Key, r.Reason, r.Rule, r.SourceTopic, r.SourcePartition, r.RedriveCount)
				}
			}
			res, err := dlq.Redrive(ctx, opts, req)
			verb := "sent"
			if dryRun {
				verb = "would send"
			}
			fmt.Fprintf(out, "%s: %d\nskipped by filter: %d\nrefused by loop guard (redrive count ≥ %d): %d\nunroutable (no dlq.source.topic, or that topic does not exist): %d\n"+
				"not re-driven, value omitted (the original is only at its dlq.source.* coordinates): %d\n"+
				"duplicate dead letters of a source record already sent in this run: %d\n",
				verb, res.Sent, res.Filtered, maxRedrives, res.Refused, res.Unroutable, res.Omitted, res.Duplicates)
			if err != nil {
				return err
			}
			if !dryRun && res.Sent > 0 {
				fmt.Fprintf(out, "re-driven records stay in %s; to skip them next time add --since %s\n", topic, res.StartedAt.Format(time.RFC3339))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", topics.BronzeDLQ, "DLQ topic")
	ff.register(cmd)
	f.BoolVar(&dryRun, "dry-run", false, "list what would be sent; send nothing")
	f.BoolVar(&all, "all", false, "re-send every record of the topic when no filter is given (refused without it)")
	f.IntVar(&maxRedrives, "max-redrives", dlq.DefaultMaxRedrives, "refuse records whose dlq.redrive_count (redrives that failed again) reached this")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "time limit for the operation once connected")
	return g.withServiceFlags(cmd, kafkaFlags)
}

func newDLQArchiveCmd(g *globalConfig) *cobra.Command {
	var (
		topic, group string
		once         bool
	)
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Copy DLQ records into the dlq_archive table of DATABASE_URL",
		Long: `archive consumes the DLQ topic as a consumer group and inserts every record
into dlq_archive (created by sluice migrate), committing offsets only after
the rows are stored; records already archived are ignored, so it is safe to
repeat. Rows are keyed by the DLQ topic's ID, partition and offset, so the
records of a DLQ topic deleted and recreated are archived as new rows. It runs until interrupted, retrying database errors; --once archives
up to the current end and exits, and fails on a database error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.needDatabase(); err != nil {
				return err
			}
			if topic == "" {
				return errors.New("empty --topic")
			}
			// A malformed URL is a flag error: reported before connecting.
			if _, err := postgresPoolConfig(g.DatabaseURL); err != nil {
				return err
			}
			// Without --once the archiver waits for records forever: a
			// missing topic (a typo) must fail now, not leave it idle.
			if err := topicExists(cmd.Context(), g, topic); err != nil {
				return fmt.Errorf("dlq archive: %w", err)
			}
			opts, err := g.Kafka.Opts()
			if err != nil {
				return err
			}
			pool, err := archivePool(cmd.Context(), g.DatabaseURL)
			if err != nil {
				return err
			}
			defer pool.Close()
			logger := dlq.ArchiveLogger(g.logger())
			if once {
				res, err := dlq.ArchiveOnce(cmd.Context(), opts, pool, topic, group, logger)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "archived %d new record(s) of %d read from %s\n", res.Inserted, res.Read, topic)
				return nil
			}
			return dlq.Archive(cmd.Context(), opts, pool, topic, group, logger)
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", topics.BronzeDLQ, "DLQ topic")
	f.StringVar(&group, "group", dlq.DefaultArchiveGroup, "consumer group of the archiver")
	f.BoolVar(&once, "once", false, "archive up to the current end and exit")
	return g.withServiceFlags(cmd, kafkaFlags|postgresFlags)
}

// topicExists connects to Kafka (see kafkaAdmin) and fails when topic is
// not on the cluster.
func topicExists(ctx context.Context, g *globalConfig, topic string) error {
	adm, closeFn, err := kafkaAdmin(ctx, g)
	if err != nil {
		return err
	}
	defer closeFn()
	cctx, cancel := context.WithTimeout(ctx, kafkaConnectTimeout)
	defer cancel()
	td, err := adm.ListTopics(cctx, topic)
	if err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("topic %q does not exist", topic)
	}
	if d.Err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, d.Err)
	}
	return nil
}

// archivePool connects to PostgreSQL within databaseConnectTimeout and checks
// that the dlq_archive table exists and is migrated (has dlq_topic_id).
func archivePool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cctx, cancel := context.WithTimeout(ctx, databaseConnectTimeout)
	defer cancel()
	cfg, err := postgresPoolConfig(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, postgresError(cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	var exists, migrated bool
	if err := pool.QueryRow(cctx, `SELECT to_regclass('dlq_archive') IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass('dlq_archive') AND attname = 'dlq_topic_id' AND NOT attisdropped)`).Scan(&exists, &migrated); err != nil {
		pool.Close()
		if cctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", databaseConnectTimeout)
		}
		return nil, postgresError(cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	if !exists {
		pool.Close()
		return nil, fmt.Errorf("table dlq_archive does not exist: run sluice migrate first")
	}
	if !migrated {
		pool.Close()
		return nil, fmt.Errorf("table dlq_archive has no dlq_topic_id column: run sluice migrate first")
	}
	return pool, nil
}
