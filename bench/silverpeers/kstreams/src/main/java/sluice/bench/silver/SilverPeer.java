package sluice.bench.silver;

import java.nio.charset.StandardCharsets;
import java.sql.Array;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateStore;
import org.apache.kafka.streams.processor.StateStoreContext;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.StoreBuilder;

/**
 * The Kafka Streams 4.4 peer of sluice's silver pipeline for make bench-silver (variant k of
 * bench/silverbench): what a Kafka Streams user would write for bronze → ta_silver / sa_silver.
 *
 * <p>bronze → validate (Rules: decode + the 14 rules, first failure wins) → split: invalid records
 * go to the DLQ topic unchanged with the headers dlq.reason and dlq.rule; valid rows go to a
 * processor that buffers them per key in an {@link UpsertBuffer} state store (rows of one key
 * merged as the upsert would merge them) and writes the buffer with JDBC batches of INSERT … ON
 * CONFLICT DO UPDATE (the silver sink's SET clause) over reWriteBatchedInserts. Kafka Streams
 * flushes every state store before it commits a task's offsets, so offsets are committed only
 * after the rows are durable (at least once). The buffer is also written when it holds
 * MAX_KEYS keys.
 *
 * <p>Usage: SilverPeer BRONZE_TOPIC DLQ_TOPIC APPLICATION_ID STATE_DIR; env KAFKA_BROKERS and
 * SILVER_JDBC_URL (jdbc:postgresql://…, with user, password and currentSchema). Prints
 * {"state":…,"at_ms":…} on state changes. Runs until SIGTERM.
 */
public final class SilverPeer {
  static final String STORE = "silver-upsert";
  static final int MAX_KEYS = 10_000;

  static final String TA_SQL =
      "INSERT INTO ta_silver AS t (symbol, trade_date, open, high, low, close, volume, vwap, adj_close,"
          + " currency, price_multiplier, source, first_seen_time, content_hash)"
          + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (symbol, trade_date) DO UPDATE SET"
          + " open = EXCLUDED.open, high = EXCLUDED.high, low = EXCLUDED.low, close = EXCLUDED.close,"
          + " volume = EXCLUDED.volume, vwap = EXCLUDED.vwap, adj_close = EXCLUDED.adj_close,"
          + " currency = EXCLUDED.currency, price_multiplier = EXCLUDED.price_multiplier,"
          + " source = EXCLUDED.source,"
          + " first_seen_time = LEAST(t.first_seen_time, EXCLUDED.first_seen_time),"
          + " content_hash = EXCLUDED.content_hash, ingest_time = now()";

  static final String SA_SQL =
      "INSERT INTO sa_silver AS t (url_canonical, source_domain, publisher_time, first_seen_time, language,"
          + " title, text_normalized, content_hash, symbols, author, topic_tags, hype_raw, hype_crowd,"
          + " hype_elitist, account_weights_applied)"
          + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (url_canonical) DO UPDATE SET"
          + " publisher_time = LEAST(t.publisher_time, EXCLUDED.publisher_time),"
          + " first_seen_time = LEAST(t.first_seen_time, EXCLUDED.first_seen_time),"
          + " language = CASE WHEN EXCLUDED.language IS NULL OR (EXCLUDED.language = 'unknown' AND"
          + " t.language IS NOT NULL) THEN t.language ELSE EXCLUDED.language END,"
          + " title = COALESCE(EXCLUDED.title, t.title),"
          + " text_normalized = COALESCE(EXCLUDED.text_normalized, t.text_normalized),"
          + " author = COALESCE(EXCLUDED.author, t.author),"
          + " symbols = CASE WHEN array_length(EXCLUDED.symbols, 1) IS NOT NULL THEN EXCLUDED.symbols ELSE t.symbols END,"
          + " topic_tags = CASE WHEN array_length(EXCLUDED.topic_tags, 1) IS NOT NULL THEN EXCLUDED.topic_tags"
          + " ELSE t.topic_tags END,"
          + " hype_raw = COALESCE(EXCLUDED.hype_raw, t.hype_raw),"
          + " hype_crowd = COALESCE(EXCLUDED.hype_crowd, t.hype_crowd),"
          + " hype_elitist = COALESCE(EXCLUDED.hype_elitist, t.hype_elitist),"
          + " account_weights_applied = COALESCE(EXCLUDED.account_weights_applied, t.account_weights_applied),"
          + " content_hash = EXCLUDED.content_hash, ingest_time = now()";

  /** The validator's verdict on one record: a row, or a dead letter (reason != null). */
  static final class Verdict {
    Rules.Row row;
    String reason, rule;
    byte[] value; // a dead letter's original value
  }

  /** Validates each bronze record. */
  static final class Validate implements FixedKeyProcessor<byte[], byte[], Verdict> {
    private FixedKeyProcessorContext<byte[], Verdict> ctx;

    @Override
    public void init(FixedKeyProcessorContext<byte[], Verdict> ctx) {
      this.ctx = ctx;
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> r) {
      Verdict v = new Verdict();
      try {
        v.row = Rules.validate(r.value(), r.timestamp());
      } catch (Rules.Fail f) {
        v.reason = f.reason;
        v.rule = f.rule;
        v.value = r.value();
      }
      ctx.forward(r.withValue(v));
    }
  }

  /** Turns a dead letter back into the original value with the dlq.reason and dlq.rule headers. */
  static final class DeadLetter implements FixedKeyProcessor<byte[], Verdict, byte[]> {
    private FixedKeyProcessorContext<byte[], byte[]> ctx;

    @Override
    public void init(FixedKeyProcessorContext<byte[], byte[]> ctx) {
      this.ctx = ctx;
    }

    @Override
    public void process(FixedKeyRecord<byte[], Verdict> r) {
      RecordHeaders h = new RecordHeaders(r.headers().toArray());
      h.add("dlq.reason", r.value().reason.getBytes(StandardCharsets.UTF_8));
      if (!r.value().rule.isEmpty()) h.add("dlq.rule", r.value().rule.getBytes(StandardCharsets.UTF_8));
      ctx.forward(r.withValue(r.value().value).withHeaders(h));
    }
  }

  /** Adds valid rows to the task's UpsertBuffer. */
  static final class Upsert implements Processor<byte[], Verdict, Void, Void> {
    private UpsertBuffer buf;

    @Override
    public void init(ProcessorContext<Void, Void> ctx) {
      buf = ctx.getStateStore(STORE);
    }

    @Override
    public void process(Record<byte[], Verdict> r) {
      buf.add(r.value().row);
    }
  }

  /**
   * The rows of one task not yet written, merged per key, and the task's JDBC connection. flush()
   * (called by Kafka Streams before it commits the task's offsets, and by add() when MAX_KEYS keys
   * are buffered) writes them in one transaction. Used by the task's stream thread only.
   */
  static final class UpsertBuffer implements StateStore {
    private final String jdbcUrl;
    private final LinkedHashMap<String, Rules.TaRow> ta = new LinkedHashMap<>();
    private final LinkedHashMap<String, Rules.SaRow> sa = new LinkedHashMap<>();
    private Connection conn;
    private PreparedStatement taStmt, saStmt;
    private boolean open;

    UpsertBuffer(String jdbcUrl) {
      this.jdbcUrl = jdbcUrl;
    }

    void add(Rules.Row row) {
      if (row.ta != null) {
        ta.merge(row.ta.key(), row.ta, Rules.TaRow::mergedWith);
      } else {
        sa.merge(row.sa.url, row.sa, Rules.SaRow::mergedWith);
      }
      if (ta.size() + sa.size() >= MAX_KEYS) flush();
    }

    @Override
    public String name() {
      return STORE;
    }

    @Override
    public void init(StateStoreContext ctx, StateStore root) {
      try {
        conn = DriverManager.getConnection(jdbcUrl);
        conn.setAutoCommit(false);
        taStmt = conn.prepareStatement(TA_SQL);
        saStmt = conn.prepareStatement(SA_SQL);
      } catch (SQLException e) {
        throw new RuntimeException("postgres: " + e.getMessage(), e);
      }
      ctx.register(root, (key, value) -> {});
      open = true;
    }

    @Override
    public void flush() {
      if (ta.isEmpty() && sa.isEmpty()) return;
      try {
        for (Rules.TaRow r : ta.values()) {
          int i = 1;
          taStmt.setString(i++, r.symbol);
          taStmt.setObject(i++, r.tradeDate);
          taStmt.setDouble(i++, r.open);
          taStmt.setDouble(i++, r.high);
          taStmt.setDouble(i++, r.low);
          taStmt.setDouble(i++, r.close);
          taStmt.setLong(i++, r.volume);
          setDouble(taStmt, i++, r.vwap);
          setDouble(taStmt, i++, r.adjClose);
          taStmt.setString(i++, r.currency);
          taStmt.setDouble(i++, r.priceMultiplier);
          taStmt.setString(i++, r.source);
          taStmt.setObject(i++, time(r.firstSeen));
          taStmt.setString(i++, r.contentHash);
          taStmt.addBatch();
        }
        for (Rules.SaRow r : sa.values()) {
          int i = 1;
          saStmt.setString(i++, r.url);
          saStmt.setString(i++, r.sourceDomain);
          saStmt.setObject(i++, time(r.publisherTime));
          saStmt.setObject(i++, time(r.firstSeen));
          saStmt.setString(i++, r.language);
          saStmt.setString(i++, r.title);
          saStmt.setString(i++, r.text);
          saStmt.setString(i++, r.contentHash);
          saStmt.setArray(i++, array(r.symbols));
          saStmt.setString(i++, r.author);
          saStmt.setArray(i++, array(r.topicTags));
          setDouble(saStmt, i++, r.hypeRaw);
          setDouble(saStmt, i++, r.hypeCrowd);
          setDouble(saStmt, i++, r.hypeElitist);
          if (r.weights == null) {
            saStmt.setNull(i++, Types.BOOLEAN);
          } else {
            saStmt.setBoolean(i++, r.weights);
          }
          saStmt.addBatch();
        }
        if (!ta.isEmpty()) taStmt.executeBatch();
        if (!sa.isEmpty()) saStmt.executeBatch();
        conn.commit();
      } catch (SQLException e) {
        try {
          conn.rollback();
        } catch (SQLException ignored) {
          // the connection is gone; the task fails and restarts from its committed offsets
        }
        throw new RuntimeException("upsert: " + e.getMessage(), e);
      }
      ta.clear();
      sa.clear();
    }

    private static void setDouble(PreparedStatement s, int i, Double v) throws SQLException {
      if (v == null) {
        s.setNull(i, Types.DOUBLE);
      } else {
        s.setDouble(i, v);
      }
    }

    private static OffsetDateTime time(Instant t) {
      return t == null ? null : OffsetDateTime.ofInstant(t, ZoneOffset.UTC);
    }

    private Array array(List<String> l) throws SQLException {
      return l == null ? null : conn.createArrayOf("text", l.toArray());
    }

    @Override
    public void close() {
      open = false;
      try {
        if (conn != null) conn.close();
      } catch (SQLException ignored) {
        // closing
      }
    }

    @Override
    public boolean persistent() {
      return false;
    }

    @Override
    public boolean isOpen() {
      return open;
    }
  }

  /** Builds one UpsertBuffer per task; no changelog, no cache. */
  static final class UpsertBufferBuilder implements StoreBuilder<UpsertBuffer> {
    private final String jdbcUrl;

    UpsertBufferBuilder(String jdbcUrl) {
      this.jdbcUrl = jdbcUrl;
    }

    @Override
    public StoreBuilder<UpsertBuffer> withCachingEnabled() {
      return this;
    }

    @Override
    public StoreBuilder<UpsertBuffer> withCachingDisabled() {
      return this;
    }

    @Override
    public StoreBuilder<UpsertBuffer> withLoggingEnabled(Map<String, String> config) {
      return this;
    }

    @Override
    public StoreBuilder<UpsertBuffer> withLoggingDisabled() {
      return this;
    }

    @Override
    public UpsertBuffer build() {
      return new UpsertBuffer(jdbcUrl);
    }

    @Override
    public Map<String, String> logConfig() {
      return Collections.emptyMap();
    }

    @Override
    public boolean loggingEnabled() {
      return false;
    }

    @Override
    public String name() {
      return STORE;
    }
  }

  public static void main(String[] args) {
    if (args.length != 4) {
      System.err.println("usage: SilverPeer BRONZE_TOPIC DLQ_TOPIC APPLICATION_ID STATE_DIR");
      System.exit(2);
    }
    String jdbcUrl = System.getenv("SILVER_JDBC_URL");
    if (jdbcUrl == null || jdbcUrl.isEmpty()) {
      System.err.println("SILVER_JDBC_URL is not set");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv().getOrDefault("KAFKA_BROKERS", "127.0.0.1:9092"));
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[2]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(System.getenv().getOrDefault("SILVER_THREADS", "2")));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);

    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(new UpsertBufferBuilder(jdbcUrl));
    KStream<byte[], byte[]> in = b.stream(args[0], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()));
    Map<String, KStream<byte[], Verdict>> split =
        in.processValues(Validate::new, Named.as("validate"))
            .split(Named.as("silver-"))
            .branch((k, v) -> v.reason != null, Branched.as("invalid"))
            .defaultBranch(Branched.as("valid"));
    split.get("silver-valid").process(Upsert::new, Named.as("upsert"), STORE);
    split.get("silver-invalid")
        .processValues(DeadLetter::new, Named.as("dead-letter"))
        .to(args[1], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(b.build(), props);
    streams.setStateListener(
        (now, before) -> {
          System.out.printf("{\"state\":\"%s\",\"at_ms\":%d}%n", now, System.currentTimeMillis());
          System.out.flush();
        });
    Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
    streams.start();
  }
}
