package sluice.bench.silver;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.time.Instant;
import java.time.LocalDate;
import java.time.OffsetDateTime;
import java.time.ZoneId;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * A port of sluice's silver decode and 14 rules (pipelines/silver: envelope.go, rules.go) for the
 * Kafka Streams peer: the same verdicts (reason, rule) and the same rows. The first failing rule
 * wins; JSON null counts as absent. Immutable and thread safe.
 */
final class Rules {
  static final String SANITY = "sanity_fail", DECODE = "decode_error", UNKNOWN = "unknown_task_type";
  static final int MIN_TEXT_LENGTH = 120;
  static final long PUBLISHER_SKEW_S = 5 * 60, FIRST_SEEN_MAX_LAG_S = 24 * 3600;

  private static final ObjectMapper JSON =
      new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
  private static final Pattern RFC3339 =
      Pattern.compile("\\d{4}-\\d{2}-\\d{2}[Tt]\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?([Zz]|[+-]\\d{2}:\\d{2})");
  private static final Pattern DATE = Pattern.compile("\\d{4}-\\d{2}-\\d{2}");
  private static final ZoneId MARKET = ZoneId.of("Asia/Ho_Chi_Minh");

  /** A dead letter: reason and rule ("" when the reason has none). */
  static final class Fail extends Exception {
    final String reason, rule;

    Fail(String reason, String rule, String msg) {
      super(msg, null, false, false);
      this.reason = reason;
      this.rule = rule;
    }
  }

  static Fail sanity(String rule, String msg) {
    return new Fail(SANITY, rule, msg);
  }

  static Fail decode(String msg) {
    return new Fail(DECODE, "", msg);
  }

  /** ta_silver's row. Nullable columns are boxed (null = NULL). */
  static final class TaRow {
    String symbol, currency, source, contentHash;
    LocalDate tradeDate;
    double open, high, low, close, priceMultiplier = 1.0;
    long volume;
    Double vwap, adjClose;
    Instant firstSeen;

    String key() {
      return symbol + "|" + tradeDate;
    }

    /** MergeTA: next's values, the earliest first_seen_time (LEAST ignores NULLs). */
    TaRow mergedWith(TaRow next) {
      Instant fs = firstSeen;
      if (fs == null || (next.firstSeen != null && next.firstSeen.isBefore(fs))) {
        fs = next.firstSeen;
      }
      next.firstSeen = fs;
      return next;
    }
  }

  /** sa_silver's row. */
  static final class SaRow {
    String url, sourceDomain, language, title, text, contentHash, author;
    Instant publisherTime, firstSeen;
    List<String> symbols, topicTags;
    Double hypeRaw, hypeCrowd, hypeElitist;
    Boolean weights;

    /**
     * MergeSA: earliest times, COALESCE for enrichment columns, a new "unknown" language never
     * replaces a stored one, arrays only when non-empty, next's content_hash; url and
     * source_domain kept.
     */
    SaRow mergedWith(SaRow n) {
      if (n.publisherTime.isBefore(publisherTime)) publisherTime = n.publisherTime;
      if (n.firstSeen.isBefore(firstSeen)) firstSeen = n.firstSeen;
      if (n.language != null && !(n.language.equals("unknown") && language != null)) language = n.language;
      if (n.title != null) title = n.title;
      if (n.text != null) text = n.text;
      if (n.author != null) author = n.author;
      if (n.hypeRaw != null) hypeRaw = n.hypeRaw;
      if (n.hypeCrowd != null) hypeCrowd = n.hypeCrowd;
      if (n.hypeElitist != null) hypeElitist = n.hypeElitist;
      if (n.weights != null) weights = n.weights;
      if (n.symbols != null && !n.symbols.isEmpty()) symbols = n.symbols;
      if (n.topicTags != null && !n.topicTags.isEmpty()) topicTags = n.topicTags;
      contentHash = n.contentHash;
      return this;
    }
  }

  /** Decode + rules: exactly one of ta and sa is set. */
  static final class Row {
    TaRow ta;
    SaRow sa;
  }

  /** Decodes and validates one bronze value; recordMs is the Kafka record timestamp. */
  static Row validate(byte[] value, long recordMs) throws Fail {
    JsonNode top;
    try {
      top = JSON.readTree(value);
    } catch (Exception e) {
      throw decode("envelope: " + e.getMessage());
    }
    if (top == null || !top.isObject()) throw decode("envelope: not a JSON object");
    JsonNode payload = present(top.get("payload"));
    if (payload == null) throw decode("envelope: payload missing");
    if (!payload.isObject()) throw decode("envelope: payload must be a JSON object");
    JsonNode id = present(top.get("task_id"));
    if (id != null && !id.isTextual() && !id.isNumber()) throw decode("envelope: task_id");
    Instant envFirstSeen = null;
    JsonNode fs = present(top.get("first_seen"));
    if (fs != null) {
      envFirstSeen = time(fs);
      if (envFirstSeen == null) throw decode("envelope: first_seen");
    }
    JsonNode tt = present(top.get("task_type"));
    if (tt == null || !tt.isTextual()) throw new Fail(UNKNOWN, "", "task_type missing or not a string");
    Row row = new Row();
    switch (tt.textValue()) {
      case "ta.bar" -> row.ta = ta(payload, envFirstSeen, recordMs);
      case "sa.article" -> row.sa = sa(payload, envFirstSeen);
      default -> throw new Fail(UNKNOWN, "", "unknown task_type");
    }
    return row;
  }

  private static JsonNode present(JsonNode n) {
    return n == null || n.isNull() ? null : n;
  }

  /** An RFC 3339 string as an instant truncated to microseconds, or null. */
  private static Instant time(JsonNode n) {
    if (!n.isTextual() || !RFC3339.matcher(n.textValue()).matches()) return null;
    try {
      return OffsetDateTime.parse(n.textValue().toUpperCase()).toInstant().truncatedTo(ChronoUnit.MICROS);
    } catch (Exception e) {
      return null;
    }
  }

  /** A required string field, else the rule fails. */
  private static String reqString(JsonNode p, String name, String rule) throws Fail {
    JsonNode n = present(p.get(name));
    if (n == null) throw sanity(rule, name + " missing");
    if (!n.isTextual()) throw sanity(rule, name + ": want a string");
    return n.textValue();
  }

  /** An optional string (null when absent); another type fails with rule, or decode_error when rule is null. */
  private static String optString(JsonNode p, String name, String rule) throws Fail {
    JsonNode n = present(p.get(name));
    if (n == null) return null;
    if (!n.isTextual()) throw rule == null ? decode(name + ": want a string") : sanity(rule, name + ": want a string");
    return n.textValue();
  }

  private static Double optDouble(JsonNode p, String name) throws Fail {
    JsonNode n = present(p.get(name));
    if (n == null) return null;
    if (!n.isNumber()) throw decode(name + ": want a number");
    return n.doubleValue();
  }

  private static List<String> optStrings(JsonNode p, String name, String rule) throws Fail {
    JsonNode n = present(p.get(name));
    if (n == null) return null;
    if (!n.isArray()) throw rule == null ? decode(name + ": want an array") : sanity(rule, name + ": want an array");
    List<String> out = new ArrayList<>(n.size());
    for (JsonNode e : n) {
      if (!e.isTextual()) throw rule == null ? decode(name + ": want strings") : sanity(rule, name + ": want strings");
      out.add(e.textValue());
    }
    return out;
  }

  static boolean isSymbol(String s) {
    if (s.length() < 3 || s.length() > 7) return false;
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < 'A' || c > 'Z') return false;
    }
    return true;
  }

  private static TaRow ta(JsonNode p, Instant envFirstSeen, long recordMs) throws Fail {
    TaRow r = new TaRow();
    r.symbol = reqString(p, "symbol", "ta.symbol");
    if (!isSymbol(r.symbol)) throw sanity("ta.symbol", "symbol does not match ^[A-Z]{3,7}$");

    String ds = reqString(p, "trade_date", "ta.trade_date");
    if (!DATE.matcher(ds).matches()) throw sanity("ta.trade_date", "not YYYY-MM-DD");
    try {
      r.tradeDate = LocalDate.parse(ds);
    } catch (Exception e) {
      throw sanity("ta.trade_date", "not a valid date");
    }
    if (r.tradeDate.getYear() < 1900) throw sanity("ta.trade_date", "before 1900-01-01");
    if (r.tradeDate.isAfter(LocalDate.now(MARKET))) throw sanity("ta.trade_date", "after today");

    double[] prices = new double[4];
    String[] names = {"open", "high", "low", "close"};
    for (int i = 0; i < 4; i++) {
      JsonNode n = present(p.get(names[i]));
      if (n == null) throw sanity("ta.price", names[i] + " missing");
      if (!n.isNumber()) throw sanity("ta.price", names[i] + ": want a number");
      prices[i] = n.doubleValue();
      if (prices[i] < 0) throw sanity("ta.price", names[i] + " is negative");
    }
    r.open = prices[0];
    r.high = prices[1];
    r.low = prices[2];
    r.close = prices[3];
    if (r.high < Math.max(r.open, r.close) || r.low > Math.min(r.open, r.close) || r.high < r.low) {
      throw sanity("ta.price_relation", "high/low do not enclose open/close");
    }

    JsonNode v = present(p.get("volume"));
    if (v == null) throw sanity("ta.volume", "volume missing");
    if (!v.isIntegralNumber() || !v.canConvertToLong()) throw sanity("ta.volume", "volume: want an integer");
    r.volume = v.longValue();
    if (r.volume < 0) throw sanity("ta.volume", "volume is negative");
    if (r.volume == 0 && !(r.open == r.high && r.high == r.low && r.low == r.close)) {
      throw sanity("ta.zero_volume", "volume 0 but the candle is not flat");
    }

    String cur = optString(p, "currency", "ta.currency");
    if (cur == null || cur.isEmpty()) {
      r.currency = "VND";
    } else if (cur.length() == 3 && isSymbol(cur)) {
      r.currency = cur;
    } else {
      throw sanity("ta.currency", "currency does not match ^[A-Z]{3}$");
    }

    r.vwap = optDouble(p, "vwap");
    r.adjClose = optDouble(p, "adj_close");
    Double pm = optDouble(p, "price_multiplier");
    if (pm != null) r.priceMultiplier = pm;
    r.source = optString(p, "source", null);
    r.contentHash = optString(p, "content_hash", null);
    JsonNode fs = present(p.get("first_seen_time"));
    if (fs != null) {
      r.firstSeen = time(fs);
      if (r.firstSeen == null) throw decode("first_seen_time");
    } else if (envFirstSeen != null) {
      r.firstSeen = envFirstSeen;
    } else {
      r.firstSeen = Instant.ofEpochMilli(recordMs);
    }
    return r;
  }

  private static SaRow sa(JsonNode p, Instant envFirstSeen) throws Fail {
    SaRow r = new SaRow();
    r.url = reqString(p, "url_canonical", "sa.url");
    checkURL(r.url);

    JsonNode pt = present(p.get("publisher_time"));
    if (pt == null) throw sanity("sa.publisher_time", "publisher_time missing");
    r.publisherTime = time(pt);
    if (r.publisherTime == null) throw sanity("sa.publisher_time", "publisher_time: not RFC 3339");
    if (r.publisherTime.isAfter(Instant.now().plusSeconds(PUBLISHER_SKEW_S))) {
      throw sanity("sa.publisher_time", "publisher_time in the future");
    }

    JsonNode fs = present(p.get("first_seen_time"));
    if (fs != null) {
      r.firstSeen = time(fs);
      if (r.firstSeen == null) throw sanity("sa.first_seen", "first_seen_time: not RFC 3339");
    } else if (envFirstSeen != null) {
      r.firstSeen = envFirstSeen;
    } else {
      throw sanity("sa.first_seen", "first_seen_time missing");
    }
    if (r.firstSeen.isBefore(r.publisherTime.minusSeconds(FIRST_SEEN_MAX_LAG_S))) {
      throw sanity("sa.first_seen", "first_seen_time too early");
    }

    r.text = reqString(p, "text_normalized", "sa.text");
    if (r.text.codePointCount(0, r.text.length()) < MIN_TEXT_LENGTH) throw sanity("sa.text", "text too short");

    r.contentHash = reqString(p, "content_hash", "sa.content_hash");
    if (r.contentHash.strip().isEmpty()) throw sanity("sa.content_hash", "content_hash is empty");

    r.symbols = optStrings(p, "symbols", "sa.symbols");
    if (r.symbols != null) {
      for (String s : r.symbols) {
        if (!isSymbol(s)) throw sanity("sa.symbols", "symbol does not match ^[A-Z]{3,7}$");
      }
    }

    r.sourceDomain = reqString(p, "source_domain", "sa.source_domain");
    if (r.sourceDomain.strip().isEmpty()) throw sanity("sa.source_domain", "source_domain is empty");

    r.language = "unknown";
    JsonNode lang = present(p.get("language"));
    if (lang != null && lang.isTextual() && (lang.textValue().equals("vi") || lang.textValue().equals("en"))) {
      r.language = lang.textValue();
    }
    r.title = optString(p, "title", null);
    r.author = optString(p, "author", null);
    r.topicTags = optStrings(p, "topic_tags", null);
    r.hypeRaw = optDouble(p, "hype_raw");
    r.hypeCrowd = optDouble(p, "hype_crowd");
    r.hypeElitist = optDouble(p, "hype_elitist");
    JsonNode w = present(p.get("account_weights_applied"));
    if (w != null) {
      if (!w.isBoolean()) throw decode("account_weights_applied: want a boolean");
      r.weights = w.booleanValue();
    }
    return r;
  }

  /** Rule sa.url: an absolute http or https URL with a host and no white space. */
  private static void checkURL(String s) throws Fail {
    if (s.isBlank()) throw sanity("sa.url", "url_canonical is empty");
    for (int i = 0; i < s.length(); i++) {
      if (Character.isWhitespace(s.charAt(i))) throw sanity("sa.url", "url_canonical holds white space");
    }
    URI u;
    try {
      u = new URI(s);
    } catch (Exception e) {
      throw sanity("sa.url", "url_canonical is not a URL");
    }
    String scheme = u.getScheme() == null ? "" : u.getScheme().toLowerCase();
    if (!scheme.equals("http") && !scheme.equals("https")) throw sanity("sa.url", "not http or https");
    String host = u.getHost() != null ? u.getHost() : u.getRawAuthority();
    if (host == null || host.isEmpty()) throw sanity("sa.url", "url_canonical has no host");
  }
}
