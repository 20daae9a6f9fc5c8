package sluice.bench;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams peer of sluice's trades-digest for make bench-trades: trade.scored events
 * (keyed by user_id) are summed per user and ISO week (Monday 00:00 UTC to the next, end
 * exclusive) in a RocksDB window store with its changelog, and one digest {user_id, period{start,
 * end}, agg} per closed window is written to the output topic (suppress untilWindowCloses, grace
 * 1 h). The aggregate is the one of sluice's trades.Aggregate: counts, notional, fees, realized
 * P/L, counts_by_label, pnl_by_label (each matched lot's P/L under every label of the lot, else
 * "unlabelled"), biased_trade_share (4 decimals), streaks over SELLs with P/L != 0 (rounded to 8
 * digits) and top_insight; amounts are exact and written with 8 fractional digits, rounded
 * half-even.
 *
 * <p>Unlike sluice, the accumulator is a running sum: it does not deduplicate a redelivered
 * trade by trade_id, and its streaks assume a user's trades arrive in history order (the corpus
 * guarantees both). The record timestamp is the trade's ts.
 *
 * <p>Usage: DigestPeer INPUT OUTPUT APPLICATION_ID STATE_DIR (brokers from KAFKA_BROKERS). It
 * prints JSON lines: state changes and restored stores, with wall-clock milliseconds.
 */
public final class DigestPeer {
  static final ObjectMapper JSON = new ObjectMapper().enable(JsonGenerator.Feature.WRITE_BIGDECIMAL_AS_PLAIN);
  static final Duration WEEK = Duration.ofDays(7);
  static final Duration GRACE = Duration.ofHours(1);
  /**
   * Windows are aligned to the epoch, a Thursday; moving event time 4 days back puts Mondays on
   * window starts (backwards, so that no timestamp the app writes is in the future).
   */
  static final long SHIFT_MS = -Duration.ofDays(4).toMillis();
  /**
   * Store (and changelog) retention: sluice keeps a window 8 weeks past its end; this keeps the
   * corpus's 8 closed weeks, shifted, within the broker's time-based retention of the changelog.
   */
  static final Duration RETENTION = Duration.ofDays(70);

  static final String UNLABELLED = "unlabelled";

  /** The running aggregate of one (user, week); serialised as JSON in the store and changelog. */
  public static final class Acc {
    public int trades, buys, sells, biased, win, loss, longestWin, longestLoss;
    public BigDecimal notional = BigDecimal.ZERO, fees = BigDecimal.ZERO, realized = BigDecimal.ZERO;
    public TreeMap<String, Integer> counts = new TreeMap<>();
    public TreeMap<String, BigDecimal> pnl = new TreeMap<>();

    /** Adds one event; events other than trade.scored (the watermarks) change nothing. */
    Acc add(String value) {
      JsonNode ev = read(value);
      if (!"trade.scored".equals(ev.path("type").asText())) {
        return this;
      }
      JsonNode p = ev.path("payload");
      trades++;
      notional = notional.add(dec(p.path("qty")).multiply(dec(p.path("price"))));
      fees = fees.add(dec(p.path("fee")));
      TreeSet<String> labels = distinct(p.path("labels"));
      if (!labels.isEmpty()) {
        biased++;
      }
      labels.forEach(l -> counts.merge(l, 1, Integer::sum));
      if ("BUY".equals(p.path("side").asText())) {
        buys++;
        return this;
      }
      sells++;
      BigDecimal r = p.path("realized_pnl").isMissingNode() || p.path("realized_pnl").isNull()
          ? BigDecimal.ZERO : dec(p.path("realized_pnl"));
      realized = realized.add(r);
      for (JsonNode lot : p.path("lots")) {
        TreeSet<String> ls = distinct(lot.path("labels"));
        if (ls.isEmpty()) {
          ls.add(UNLABELLED);
        }
        BigDecimal lp = dec(lot.path("pnl"));
        ls.forEach(l -> pnl.merge(l, lp, BigDecimal::add));
      }
      switch (r.setScale(8, RoundingMode.HALF_EVEN).signum()) {
        case 1 -> { win++; loss = 0; }
        case -1 -> { loss++; win = 0; }
        default -> { }
      }
      longestWin = Math.max(longestWin, win);
      longestLoss = Math.max(longestLoss, loss);
      return this;
    }

    /** The digest record, in the field order of trades.Agg. */
    String digest(String user, String start, String end) {
      ObjectNode d = JSON.createObjectNode();
      d.put("user_id", user);
      d.putObject("period").put("start", start).put("end", end);
      ObjectNode a = d.putObject("agg");
      a.put("trades", trades).put("buys", buys).put("sells", sells);
      a.put("notional", fixed8(notional)).put("fees", fixed8(fees)).put("realized_pnl", fixed8(realized));
      ObjectNode c = a.putObject("counts_by_label");
      counts.forEach(c::put);
      ObjectNode pl = a.putObject("pnl_by_label");
      pnl.forEach((l, v) -> pl.put(l, fixed8(v)));
      BigDecimal share = trades == 0 ? BigDecimal.ZERO
          : BigDecimal.valueOf(Math.round((double) biased / trades * 1e4), 4).stripTrailingZeros();
      a.put("biased_trade_share", share);
      a.putObject("streaks").put("longest_win", longestWin).put("longest_loss", longestLoss);
      Map.Entry<String, BigDecimal> top = null;
      for (Map.Entry<String, BigDecimal> e : pnl.entrySet()) {
        if (e.getKey().equals(UNLABELLED) || e.getValue().signum() >= 0) {
          continue;
        }
        // most negative, then the larger count, then the smaller name (the map is sorted by name)
        if (top == null || e.getValue().compareTo(top.getValue()) < 0
            || (e.getValue().compareTo(top.getValue()) == 0
                && counts.getOrDefault(e.getKey(), 0) > counts.getOrDefault(top.getKey(), 0))) {
          top = e;
        }
      }
      if (top == null) {
        a.putNull("top_insight");
      } else {
        a.putObject("top_insight").put("label", top.getKey()).put("pnl", fixed8(top.getValue()));
      }
      return d.toString();
    }
  }

  static String fixed8(BigDecimal v) {
    return v.setScale(8, RoundingMode.HALF_EVEN).toPlainString();
  }

  static BigDecimal dec(JsonNode n) {
    return new BigDecimal(n.asText());
  }

  static TreeSet<String> distinct(JsonNode arr) {
    TreeSet<String> s = new TreeSet<>();
    arr.forEach(n -> s.add(n.asText()));
    return s;
  }

  static JsonNode read(String s) {
    try {
      return JSON.readTree(s);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static Serde<Acc> accSerde() {
    return Serdes.serdeFrom(
        (topic, acc) -> {
          try {
            return JSON.writeValueAsBytes(acc);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        },
        (topic, bytes) -> {
          try {
            return bytes == null ? null : JSON.readValue(bytes, Acc.class);
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        });
  }

  /** Event time = the record timestamp (the trade's ts) shifted so that windows start on Mondays. */
  public static final class MondayShift implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      return record.timestamp() + SHIFT_MS;
    }
  }

  static String date(long shiftedMs) {
    return Instant.ofEpochMilli(shiftedMs - SHIFT_MS).atZone(ZoneOffset.UTC).toLocalDate().toString();
  }

  static void log(String event, String field, Object value) {
    System.out.printf("{\"event\":\"%s\",\"%s\":\"%s\",\"at_ms\":%d}%n", event, field, value, System.currentTimeMillis());
    System.out.flush();
  }

  public static void main(String[] args) {
    if (args.length != 4) {
      System.err.println("usage: DigestPeer INPUT OUTPUT APPLICATION_ID STATE_DIR");
      System.exit(2);
    }
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, System.getenv().getOrDefault("KAFKA_BROKERS", "127.0.0.1:9092"));
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[2]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);

    StreamsBuilder b = new StreamsBuilder();
    b.stream(args[0], Consumed.with(Serdes.String(), Serdes.String()).withTimestampExtractor(new MondayShift()))
        .groupByKey()
        .windowedBy(TimeWindows.ofSizeAndGrace(WEEK, GRACE))
        .aggregate(Acc::new, (user, value, acc) -> acc.add(value),
            Materialized.<String, Acc, WindowStore<Bytes, byte[]>>as("digest-agg")
                .withKeySerde(Serdes.String()).withValueSerde(accSerde()).withRetention(RETENTION))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .filter((w, acc) -> acc.trades > 0)
        .map((Windowed<String> w, Acc acc) -> {
          String start = date(w.window().start());
          return KeyValue.pair(w.key() + "|" + start, acc.digest(w.key(), start, date(w.window().end())));
        })
        .to(args[1], Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(b.build(), props);
    streams.setStateListener((now, before) -> log("state", "state", now));
    streams.setGlobalStateRestoreListener(new StateRestoreListener() {
      @Override
      public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
        log("restoring", "store", store + "/" + tp.partition() + " offsets " + start + "-" + end);
      }

      @Override
      public void onBatchRestored(TopicPartition tp, String store, long end, long n) {}

      @Override
      public void onRestoreEnd(TopicPartition tp, String store, long total) {
        log("restored", "store", store + "/" + tp.partition() + " records " + total);
      }
    });
    Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
    streams.start();
  }
}
