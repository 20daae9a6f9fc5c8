package trades

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

// eventSchemas names the schema of each event type.
var eventSchemas = map[string]string{
	TypeTradeUpserted: schemas.TradesTradeUpserted, TypeImportProgress: schemas.TradesImportProgress,
	TypeImportCompleted: schemas.TradesImportCompleted, TypeImportFailed: schemas.TradesImportFailed,
	TypeScoreRequest: schemas.TradesScoreRequest, TypeTradeScored: schemas.TradesTradeScored,
	TypeDigestRequest: schemas.TradesDigestRequest, TypeCoachReflect: schemas.TradesCoachReflect,
	TypeDigestReady: schemas.TradesDigestReady,
}

// Every record the running pipeline writes matches its schema in
// schemas/json: commands (import, push, chained pages with and without
// not_before, a rejected trade's one-trade push), import states, every
// event type, the digest store's window states (its contribution sets are
// binary: they decode), the DLQ's
// commands and the digest object. The scenario: a synthetic import with a
// rate-limited page, one whose page keeps failing (import.failed), a push
// with numbers, decimal strings and one bad trade, then score and digest
// requests.
func TestRecordsMatchSchemas(t *testing.T) {
	t.Parallel()
	set, err := schemas.Compile()
	if err != nil {
		t.Fatal(err)
	}
	h := newSvcHarness(t, testkit.FakeOK())
	now := time.Now().UTC()
	h.clock.Set(now)
	cfg := h.cfg
	cfg.Import.Retry.MaxAttempts = 2
	cfg.Import.Retry.Initial, cfg.Import.Retry.Max = 10*time.Millisecond, 20*time.Millisecond
	h.start(cfg)

	since := now.AddDate(0, 0, -2).Format(time.DateOnly)
	importTopic := h.topic(topics.TradesImport)
	h.produce(importTopic, "u1", ImportCommand{UserID: "u1", Since: since, Broker: BrokerSynthetic,
		Options: &SyntheticOptions{Trades: 30, PageSize: 12, ExhaustPage: 1, ResetMS: 10}})
	h.produce(importTopic, "u2", ImportCommand{UserID: "u2", Since: since, Broker: BrokerSynthetic, Force: true,
		Options: &SyntheticOptions{Trades: 24, PageSize: 12, FailPage: 2, FailTimes: 10}})
	ts := func(m int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf("%q", now.Add(-time.Hour+time.Duration(m)*time.Minute).Format(time.RFC3339Nano)))
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	pushed, err := json.Marshal([]RawTrade{
		{ID: raw(`"p1"`), Symbol: raw(`"btc-usd"`), Side: raw(`"buy"`), Qty: raw(`"0.50000000"`), Price: raw(`"100.1"`), TS: ts(0)},
		{ID: raw(`2`), Symbol: raw(`"BTC-USD"`), Side: raw(`"SELL"`), Qty: raw(`0.5`), Price: raw(`90`), Fee: raw(`"0.125"`), TS: ts(5)},
		{ID: raw(`"p3"`), Symbol: raw(`"BTC-USD"`), Side: raw(`"BUY"`), Qty: raw(`"1e1"`), Price: raw(`"95"`), Fee: raw(`null`), TS: ts(10)},
		{ID: raw(`"bad"`), Symbol: raw(`"BTC-USD"`), Side: raw(`"BUY"`), Qty: raw(`"-1"`), Price: raw(`95`), TS: ts(11)},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.produce(importTopic, "u3", PushCommand{UserID: "u3", Broker: BrokerSynthetic, PushID: "push-1", Trades: pushed})

	byType := func(topic, typ string, n int) {
		t.Helper()
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("%d %s on %s", n, typ, topic), func() bool {
			c := 0
			for _, e := range h.events(topic) {
				if e.Type == typ {
					c++
				}
			}
			return c >= n
		})
	}
	byType(topics.TradesEvents, TypeImportCompleted, 2)
	byType(topics.TradesEvents, TypeImportFailed, 1)
	byType(topics.CoachReflect, TypeCoachReflect, 1)

	q := NewRequester(h.cl, h.topic(topics.TradesEvents), h.topic(topics.TradesBias))
	ctx := testkit.Context(t)
	if _, err := q.Score(ctx, "u3", since, now); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Digest(ctx, "u3", WeekOf(now.Add(-time.Hour)), now); err != nil {
		t.Fatal(err)
	}
	byType(topics.DigestReady, TypeDigestReady, 1)

	// Every record of every topic, by the schema of its topic.
	seen := map[string]int{}
	check := func(schema string, r *kgo.Record) {
		t.Helper()
		if err := set.Validate(schema, r.Value); err != nil {
			t.Errorf("%s record (key %s): %v\n%s", r.Topic, r.Key, err, r.Value)
		}
		seen[schema]++
	}
	for _, name := range []string{topics.TradesImport, topics.TradesImportState} {
		schema := map[string]string{topics.TradesImport: schemas.TradesCommand, topics.TradesImportState: schemas.TradesImportState}[name]
		for _, r := range h.k.ReadTopic(t, h.topic(name)) {
			if r.Value == nil {
				continue
			}
			check(schema, r)
			var probe struct {
				Kind      string     `json:"kind"`
				NotBefore *time.Time `json:"not_before"`
			}
			if err := json.Unmarshal(r.Value, &probe); err != nil {
				t.Fatal(err)
			}
			if name == topics.TradesImport {
				seen["command "+probe.Kind]++
				if probe.NotBefore != nil {
					seen["page with not_before"]++
				}
			}
		}
	}
	// The digest store: a window state (W|user|start) is JSON and matches
	// its schema; a contribution set (C|user|start) is binary and decodes.
	for _, r := range h.k.ReadTopic(t, h.topic(topics.TradesDigestState)) {
		if r.Value == nil {
			continue
		}
		e, err := decodeDigestEntry(r.Value)
		switch {
		case err != nil:
			t.Errorf("digest store record (key %s): %v\n%q", r.Key, err, r.Value)
		case strings.HasPrefix(string(r.Key), "W|") && e.Window != nil:
			check(schemas.TradesDigestState, r)
			seen["window state"]++
		case strings.HasPrefix(string(r.Key), "C|") && len(e.Contribs) > 0:
			seen["contribution set"]++
		default:
			t.Errorf("digest store record (key %s) decodes as %+v: not a window state under W| nor contributions under C|", r.Key, e)
		}
	}
	var ready []Event[DigestReady]
	for _, name := range []string{topics.TradesEvents, topics.TradesBias, topics.CoachReflect, topics.DigestReady} {
		for _, r := range h.k.ReadTopic(t, h.topic(name)) {
			check(schemas.TradesEvent, r)
			var e Event[json.RawMessage]
			if err := json.Unmarshal(r.Value, &e); err != nil {
				t.Fatal(err)
			}
			check(eventSchemas[e.Type], r)
			seen[e.Type]++
			if e.Type == TypeDigestReady {
				var d Event[DigestReady]
				if err := json.Unmarshal(r.Value, &d); err != nil {
					t.Fatal(err)
				}
				ready = append(ready, d)
			}
		}
	}
	for _, r := range h.k.ReadTopic(t, h.topic(topics.TradesDLQ)) {
		if src := testkit.Headers(r)["dlq.source.topic"]; src != importTopic {
			t.Errorf("dead letter from %s, want only commands of %s: %s", src, importTopic, r.Value)
			continue
		}
		check(schemas.TradesCommand, r)
		seen["dlq"]++
	}
	for _, d := range ready {
		b, err := h.objects.Get(ctx, d.Payload.ObjectKey)
		if err != nil {
			t.Fatalf("digest object %s: %v", d.Payload.ObjectKey, err)
		}
		if err := set.Validate(schemas.TradesDigestObject, b); err != nil {
			t.Errorf("digest object %s: %v\n%s", d.Payload.ObjectKey, err, b)
		}
		seen[schemas.TradesDigestObject]++
	}
	t.Logf("records checked: %v", seen)
	// The scenario produced every kind of record (else it proved nothing).
	for _, k := range []string{"command import", "command push", "command page", "page with not_before",
		schemas.TradesImportState, schemas.TradesDigestState, "window state", "contribution set",
		TypeTradeUpserted, TypeImportProgress, TypeImportCompleted, TypeImportFailed, TypeScoreRequest,
		TypeTradeScored, TypeDigestRequest, TypeCoachReflect, TypeDigestReady, "dlq", schemas.TradesDigestObject} {
		if seen[k] == 0 {
			t.Errorf("no %s record was checked (seen %v)", k, seen)
		}
	}
}
