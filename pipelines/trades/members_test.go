package trades

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/topics"
)

// memberEnv, when set, turns the test binary into a member of the trades
// groups configured by the JSON memberSpec in its value (see TestMain).
const memberEnv = "SLUICE_TRADES_TEST_MEMBER"

// TestMain lets the test binary run the trades pipeline in a child
// process, so that a member can be killed with SIGKILL.
func TestMain(m *testing.M) {
	testkit.RunChild(memberEnv, childMember)
	os.Exit(testkit.MainWithPostgres(m)) // one local PostgreSQL for the binary when DATABASE_URL is unset
}

// memberSpec is what a member process needs to join a svcHarness's
// deployment. It holds credentials (database URL, S3 keys): never log it.
type memberSpec struct {
	Kafka       kconf.Config
	DBURL       string
	S3          objstore.S3Config
	ObjPrefix   string
	ObjDir      string
	TopicPrefix string
	// ClockOffset is added to the wall clock (the services' clock).
	ClockOffset time.Duration
	// Settle, when set, replaces the digest's settle time.
	Settle time.Duration
	// HangPutAfter > 0: every object Put after the first HangPutAfter
	// hangs until its context ends.
	HangPutAfter int
	// HangProduceTopic, when set: producing a record to this topic hangs
	// for ever (the member is killed there).
	HangProduceTopic string
	// HangProduceContains, when set, limits the hang to records whose
	// value contains it and none of HangProduceExcludes.
	HangProduceContains string
	HangProduceExcludes []string
}

// produceHang hangs the producer of every record to topic whose value
// contains contains and none of excludes.
type produceHang struct {
	topic, contains string
	excludes        []string
}

func (h produceHang) OnProduceRecordBuffered(r *kgo.Record) {
	if r.Topic == h.topic && bytes.Contains(r.Value, []byte(h.contains)) &&
		!slices.ContainsFunc(h.excludes, func(x string) bool { return bytes.Contains(r.Value, []byte(x)) }) {
		select {}
	}
}

// memberSpec returns the spec of a member process of h's deployment.
func (h *svcHarness) memberSpec(offset time.Duration) memberSpec {
	return memberSpec{Kafka: h.k.Config, DBURL: h.pg.URL, S3: h.store.S3Config(), ObjPrefix: h.store.Prefix, ObjDir: h.store.Dir,
		TopicPrefix: h.naming.TopicPrefix, ClockOffset: offset}
}

// memberKillOpts are the client options of a member that is killed: the
// group notices it within 6 s.
func memberKillOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond), kgo.FetchMaxWait(100 * time.Millisecond)}
}

// hangingStore hangs every Put after the first after until its context
// ends: a member stopped in the middle of a digest emission.
type hangingStore struct {
	objstore.Store
	after int64
	puts  atomic.Int64
}

func (s *hangingStore) Put(ctx context.Context, key string, data []byte, contentType string) error {
	if s.puts.Add(1) > s.after {
		<-ctx.Done()
		return fmt.Errorf("hanging put %s: %w", key, ctx.Err())
	}
	return s.Store.Put(ctx, key, data, contentType)
}

// childMember runs the trades pipeline until it is killed or signalled.
func childMember(raw string) int {
	var s memberSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "member spec:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kopts, err := s.Kafka.Opts()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		return 2
	}
	pool, err := pgxpool.New(ctx, s.DBURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "database does not open")
		return 2
	}
	defer pool.Close()
	var objects objstore.Store
	if s.ObjDir != "" {
		objects, err = objstore.NewDir(s.ObjDir)
	} else {
		var s3 *objstore.S3
		s3, err = objstore.NewS3(ctx, s.S3)
		objects = objstore.WithPrefix(s3, s.ObjPrefix)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "object store:", err)
		return 2
	}
	if s.HangPutAfter > 0 {
		objects = &hangingStore{Store: objects, after: int64(s.HangPutAfter)}
	}
	kopts = append(kopts, memberKillOpts()...)
	if s.HangProduceTopic != "" {
		kopts = append(kopts, kgo.WithHooks(produceHang{s.HangProduceTopic, s.HangProduceContains, s.HangProduceExcludes}))
	}
	env := pipelines.Env{
		Kafka: kopts, DB: pool, Objects: objects, Registerer: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg := fastConfig(func() time.Time { return time.Now().Add(s.ClockOffset) })
	if s.Settle > 0 {
		cfg.Digest.Settle = s.Settle
	}
	set, err := pipelines.Build(env, pipelines.Naming{TopicPrefix: s.TopicPrefix, GroupPrefix: s.TopicPrefix}, []pipelines.Spec{Declare(cfg)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		return 2
	}
	defer set.Close()
	g, gctx := errgroup.WithContext(ctx)
	for _, svc := range set.Services {
		g.Go(func() error { return svc.Run(gctx) })
	}
	if err := g.Wait(); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// waitMembers waits until the group (catalog name) is stable with n
// members that each hold at least one partition.
func (h *svcHarness) waitMembers(group string, n int) {
	h.t.Helper()
	adm, name := h.adm(), h.naming.Group(group)
	testkit.WaitFor(h.t, 90*time.Second, fmt.Sprintf("%d members with partitions in %s", n, group), func() bool {
		gs, err := adm.DescribeGroups(testkit.Context(h.t), name)
		if err != nil {
			return false
		}
		g, ok := gs[name]
		if !ok || g.State != "Stable" || len(g.Members) != n {
			return false
		}
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok || len(a.Topics) == 0 || len(a.Topics[0].Partitions) == 0 {
				return false
			}
		}
		return true
	})
}

// userTrades returns the user's trades rows (as LoadHistory reads them).
func (h *svcHarness) userTrades(user string) []Trade {
	h.t.Helper()
	ts, err := LoadHistory(testkit.Context(h.t), h.pg.Pool, user)
	if err != nil {
		h.t.Fatal(err)
	}
	return ts
}

// userTags is the user's bias_tags as sorted "trade_id|label".
func (h *svcHarness) userTags(user string) []string {
	h.t.Helper()
	rows, err := h.pg.Pool.Query(testkit.Context(h.t), `SELECT b.trade_id::text || '|' || b.label FROM bias_tags b
		JOIN trades tr ON tr.id = b.trade_id WHERE tr.user_id = $1 ORDER BY 1`, user)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// syntheticExtIDs are the ext ids of a synthetic import of n trades.
func syntheticExtIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("syn-%05d", i)
	}
	return out
}

func extIDs(ts []Trade) []string {
	out := make([]string, len(ts))
	for i, tr := range ts {
		out[i] = tr.ExtID
	}
	sort.Strings(out)
	return out
}

// expectTags checks the user's bias_tags against the reference scoring
// of history and returns how many labels it found.
func (h *svcHarness) expectTags(user string, history []Trade, since time.Time) int {
	h.t.Helper()
	var want []string
	for _, sc := range Score(history, since) {
		for _, l := range sc.LabelNames() {
			want = append(want, sc.Trade.ID+"|"+l)
		}
	}
	sort.Strings(want)
	if got := h.userTags(user); !slices.Equal(got, want) {
		h.t.Errorf("%s: bias_tags %v, want %v", user, got, want)
	}
	return len(want)
}

// expectDigests checks the user's digests against the reference scoring
// of history: per ISO week, one digest.ready of revision 1, and the
// digests row and object hold that week's aggregate. With repeats, a
// digest.ready may be repeated if every copy is identical (same event id
// and payload): what a crash between its publication and the changelog
// write of the window's emitted revision gives.
func (h *svcHarness) expectDigests(user string, history []Trade, since time.Time, ready []Event[json.RawMessage], repeats bool) {
	h.t.Helper()
	t := h.t
	weeks := map[string]map[string]TradeScored{}
	wins := map[string]Window{}
	for _, sc := range Score(history, since) {
		w := WeekOf(sc.Trade.TS)
		if weeks[w.StartDate()] == nil {
			weeks[w.StartDate()], wins[w.StartDate()] = map[string]TradeScored{}, w
		}
		weeks[w.StartDate()][sc.Trade.ID] = sc.Payload()
	}
	var wantReady, gotReady []string
	for start, w := range wins {
		wantReady = append(wantReady, DigestReadyEventID(user, start, 1))
		want := Aggregate(w, weeks[start])
		row, ok := h.digestRow(user, w)
		if !ok || row.revision != 1 || row.partial || aggJSON(t, row.agg) != aggJSON(t, want) {
			t.Errorf("%s %s: digests row %+v (found %v), want revision 1 of %s", user, start, row, ok, aggJSON(t, want))
		}
		if obj := h.digestObject(user, w); obj.Revision != 1 || aggJSON(t, obj.Agg) != aggJSON(t, want) {
			t.Errorf("%s %s: digest object %+v", user, start, obj)
		}
	}
	seen := map[string]DigestReady{}
	for _, e := range ready {
		p := readyOf(t, e)
		if p.UserID != user {
			continue
		}
		if first, ok := seen[e.EventID]; ok && repeats {
			if first != p {
				t.Errorf("%s: digest.ready %s repeated with another payload: %+v, then %+v", user, e.EventID, first, p)
			}
			continue
		}
		seen[e.EventID] = p
		gotReady = append(gotReady, e.EventID)
	}
	sort.Strings(wantReady)
	sort.Strings(gotReady)
	if !slices.Equal(gotReady, wantReady) {
		t.Errorf("%s: digest.ready %v, want once each %v", user, gotReady, wantReady)
	}
}

// moreFirings waits until every deployment's digest timers fired twice
// more: what a due window would have emitted is then on the topics.
func moreFirings(t *testing.T, ds ...*deployment) {
	t.Helper()
	for _, d := range ds {
		from := d.firings(t)
		testkit.WaitFor(t, 30*time.Second, "two timer firings", func() bool { return d.firings(t) >= from+2 })
	}
}

func recordsDone(t *testing.T, pipeline string, ds ...*deployment) float64 {
	t.Helper()
	var n float64
	for _, d := range ds {
		n += testkit.Metric(t, d.reg, "sluice_records_done_total", "pipeline", pipeline)
	}
	return n
}

// waitIdle waits until every group of the deployments has processed every
// record of its input topic, twice in a row over the same end offsets:
// nothing is in flight any more.
func (h *svcHarness) waitIdle(ds ...*deployment) {
	h.t.Helper()
	t, adm := h.t, h.adm()
	inputs := [][2]string{{ImportName, topics.TradesImport}, {ScoreName, topics.TradesEvents}, {DigestName, topics.TradesBias}}
	var last string
	testkit.WaitFor(t, 120*time.Second, "every group idle", func() bool {
		state := ""
		for _, in := range inputs {
			var end int64
			for _, o := range testkit.EndOffsets(t, adm, h.topic(in[1])) {
				end += o
			}
			if recordsDone(t, in[0], ds...) < float64(end) {
				return false
			}
			state += fmt.Sprintf("%s=%d ", in[1], end)
		}
		idle := state == last
		last = state
		return idle
	})
}

// pushItems is a push of the score corpus's eight trades shifted by
// shift, on symbol: on their own, a02 is revenge trading and a07 size
// escalation.
func pushItems(symbol string, shift time.Duration) json.RawMessage {
	var items []string
	for _, tr := range scoreCorpus() {
		items = append(items, fmt.Sprintf(`{"id":%q,"symbol":%q,"side":%q,"qty":%q,"price":%q,"fee":%q,"ts":%q}`,
			tr.ExtID, symbol, tr.Side, exactString(tr.Qty), exactString(tr.Price), exactString(tr.Fee), tr.TS.Add(shift).Format(time.RFC3339)))
	}
	return json.RawMessage("[" + strings.Join(items, ",") + "]")
}

// On the real stack: two members (two deployments in one process, each
// with its own clients, so distinct members of every group) share the
// synthetic imports of six users whose keys cover every partition, then a
// push of eight trades with known labels for each. Each member holds
// partitions of the three groups and processes records of each; every
// user's trades, bias_tags, digest rows, objects and digest.ready are
// exactly the reference's (Score and Aggregate over the stored trades),
// i.e. what one member gives.
func TestRealStackTwoMembersSplit(t *testing.T) {
	t.Parallel()
	h := newSvcHarnessParts(t, 3)
	testkit.RequireReal(t, h.k, h.pg, h.store)
	h.clock.Set(scoreNow)
	d1, d2 := h.start(h.cfg), h.start(h.cfg)
	for _, g := range []string{ImportName, ScoreName, DigestName} {
		h.waitMembers(g, 2)
	}
	// Two users per partition of trades.import (and so of trades.events
	// and trades.bias: all keyed by user and partitioned alike).
	part := kgo.StickyKeyPartitioner(nil).ForTopic(h.topic(topics.TradesImport))
	per := map[int]int{}
	var users []string
	for i := 0; len(users) < 6; i++ {
		u := fmt.Sprintf("m%d", i)
		if p := part.Partition(&kgo.Record{Key: []byte(u)}, 3); per[p] < 2 {
			per[p]++
			users = append(users, u)
		}
	}
	const n = 120
	opts := &SyntheticOptions{Trades: n, PageSize: 40}
	for _, u := range users {
		h.produce(h.topic(topics.TradesImport), u, ImportCommand{UserID: u, Since: "2025-01-06", Broker: BrokerSynthetic, Options: opts})
	}
	h.waitIdle(d1, d2)
	for _, u := range users {
		h.produce(h.topic(topics.TradesImport), u, PushCommand{UserID: u, Broker: BrokerCoinbase, PushID: "p1", Trades: pushItems("DOGE-USD", 8*24*time.Hour)})
	}
	h.waitIdle(d1, d2)
	h.clock.Set(scoreNow.Add(time.Minute))
	if dl := h.dlq(); len(dl) > 0 {
		t.Fatalf("dead letters: %v", dl)
	}
	h.waitEvents(topics.DigestReady, 2*len(users))
	moreFirings(t, d1, d2)
	h.waitIdle(d1, d2)

	ready := h.events(topics.DigestReady)
	since := time.Date(2025, 1, 6, 0, 0, 0, 0, time.UTC)
	wantExt := syntheticExtIDs(n)
	for _, tr := range scoreCorpus() {
		wantExt = append(wantExt, tr.ExtID)
	}
	sort.Strings(wantExt)
	labels := 0
	for _, u := range users {
		history := h.userTrades(u)
		if got := extIDs(history); !slices.Equal(got, wantExt) {
			t.Fatalf("%s: %d trades stored, want the synthetic %d and the push's 8", u, len(got), n)
		}
		pushed := 0
		for _, sc := range Score(history, since) {
			if sc.Trade.Symbol == "DOGE-USD" {
				pushed += len(sc.LabelNames())
			}
		}
		if pushed == 0 {
			t.Errorf("%s: the push's trades have no label in the reference: their bias_tags prove nothing", u)
		}
		labels += h.expectTags(u, history, since)
		h.expectDigests(u, history, since, ready, false)
	}
	for _, p := range []string{ImportName, ScoreName, DigestName} {
		for i, d := range []*deployment{d1, d2} {
			if got := recordsDone(t, p, d); got == 0 {
				t.Errorf("member %d processed no %s record", i+1, p)
			}
		}
	}
	t.Logf("%d users, %d labels, %d digest.ready", len(users), labels, len(ready))
}

// A push is scored: its import.completed carries the UTC date of its
// earliest trade as since (an empty since was dead-lettered by
// trades-score as trades.since, and the pushed trades never scored), and
// its trades get the score corpus's labels and week0's digest.
func TestPushScored(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t, testkit.ForceFake())
	h.clock.Set(scoreNow)
	d := h.start(h.cfg)
	push := PushCommand{UserID: "u1", Broker: BrokerCoinbase, PushID: "p1", Trades: pushItems("BTC", 0)}
	h.produce(h.topic(topics.TradesImport), "u1", push)
	reflects := h.waitEvents(topics.CoachReflect, 2)
	done := h.importDone(push.ImportID())
	if len(done) != 1 || done[0].Since != "2025-01-06" || done[0].Stored != 8 {
		t.Fatalf("import.completed %+v, want one of 8 trades since 2025-01-06", done)
	}
	corpus := scoreCorpus()
	a02, a07 := corpus[2].ID, corpus[7].ID
	if got, want := ids(reflects), []string{ReflectEventID(a02, []string{LabelRevengeTrading}), ReflectEventID(a07, []string{LabelSizeEscalation})}; !slices.Equal(got, want) {
		t.Errorf("coach.reflect %v, want %v", got, want)
	}
	if got := h.expectTags("u1", h.userTrades("u1"), time.Time{}); got != 2 {
		t.Errorf("%d labels, want 2", got)
	}
	if dl := h.dlq(); len(dl) != 0 {
		t.Errorf("dead letters %v", dl)
	}
	d.settle(t, len(corpus))
	h.clock.Set(scoreNow.Add(time.Minute))
	h.waitEvents(topics.DigestReady, 1)
	d.settle(t, len(corpus))
	h.expectDigests("u1", h.userTrades("u1"), time.Time{}, h.events(topics.DigestReady), false)
}

// importDone returns the import.completed payloads of importID.
func (h *svcHarness) importDone(importID string) []ImportCompleted {
	h.t.Helper()
	var out []ImportCompleted
	for _, e := range h.events(topics.TradesEvents) {
		if e.Type != TypeImportCompleted {
			continue
		}
		var p ImportCompleted
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			h.t.Fatal(err)
		}
		if p.ImportID == importID {
			out = append(out, p)
		}
	}
	return out
}

// On the real stack: a member process running a synthetic import of 500
// trades (5 pages, 400 ms each) is killed with SIGKILL after it stored
// two pages; a new member takes the partition over, restores the
// import's state and completes the run: exactly the broker's 500 trades
// stored, one import.completed with 5 pages, 500 fetched and 500 stored
// (a page run again after the kill counts once), no import.failed.
func TestRealStackImportKilled(t *testing.T) {
	t.Parallel()
	h := newSvcHarness(t)
	testkit.RequireReal(t, h.k, h.pg, h.store)
	h.clock.Set(scoreNow)
	child := testkit.StartChild(t, memberEnv, h.memberSpec(time.Until(scoreNow)))
	h.waitMembers(ImportName, 1)
	cmd := ImportCommand{UserID: "k1", Since: "2025-01-06", Broker: BrokerSynthetic, Options: &SyntheticOptions{PageLatencyMS: 400}}
	h.produce(h.topic(topics.TradesImport), cmd.UserID, cmd)
	testkit.WaitFor(t, 60*time.Second, "two pages stored", func() bool { return len(h.userTrades("k1")) >= 200 })
	child.Kill(t)
	atKill := len(h.userTrades("k1"))
	if atKill >= SyntheticTrades {
		t.Fatalf("the import had completed (%d trades) when the member was killed", atKill)
	}
	h.start(h.cfg)
	testkit.WaitFor(t, 90*time.Second, "import.completed", func() bool { return len(h.importDone(cmd.ImportID())) > 0 })
	// The score of the import runs after its completion: once its
	// trade.scored are out, a repeated completion would be too.
	testkit.WaitFor(t, 60*time.Second, "the import scored", func() bool { return len(h.events(topics.TradesBias)) >= SyntheticTrades })

	done := h.importDone(cmd.ImportID())
	if len(done) != 1 || done[0].Pages != 5 || done[0].Fetched != SyntheticTrades || done[0].Stored != SyntheticTrades || done[0].Rejected != 0 {
		t.Errorf("import.completed %+v, want one with 5 pages, 500 fetched and stored", done)
	}
	if got := extIDs(h.userTrades("k1")); !slices.Equal(got, syntheticExtIDs(SyntheticTrades)) {
		t.Errorf("%d trades stored, want the synthetic broker's %d", len(got), SyntheticTrades)
	}
	for _, e := range h.events(topics.TradesEvents) {
		if e.Type == TypeImportFailed {
			t.Errorf("import.failed %s", e.Payload)
		}
	}
	t.Logf("killed with %d of %d trades stored", atKill, SyntheticTrades)
}

// Kill points of TestRealStackDigestKilled.
const (
	// killBetweenWindows: the timer emits two windows (in one firing,
	// usually); the member dies while the second window's object is
	// written (the first one's object and row are written).
	killBetweenWindows = "between windows"
	// killBeforeReady: digest.request emits both windows; the member dies
	// after an object and row are written, before digest.ready is
	// produced.
	killBeforeReady = "request emitted, before digest.ready"
	// killBeforeMark: the timer emits the windows; the member dies after
	// a digest.ready is acknowledged, before the window's emitted revision
	// reaches the changelog. Without Kafka transactions the next member
	// cannot know digest.ready went out: by contract (at-least-once,
	// "once per (user, period, revision) in normal operation") it repeats
	// it with the same event id and payload, and emits no other revision.
	killBeforeMark = "digest.ready published, before the changelog"
)

// On the real stack: a member process is killed (SIGKILL) in the middle
// of emitting the week0 digests of two users (see the kill points); a new
// member restores the window store and finishes: exactly one
// digest.ready per (user, period, revision) — revision 1, also at
// killBeforeMark (killed after the publish, before the window's state
// after it was written: the restored Publishing mark makes the new member
// find it on the topic) — and rows and objects equal to the aggregates of
// the scored trades.
func TestRealStackDigestKilled(t *testing.T) {
	t.Parallel()
	for _, point := range []string{killBetweenWindows, killBeforeReady, killBeforeMark} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			digestKilled(t, point)
		})
	}
}

func digestKilled(t *testing.T, point string) {
	h := newSvcHarness(t)
	testkit.RequireReal(t, h.k, h.pg, h.store)
	offset := time.Until(scoreNow)
	now := func() time.Time { return time.Now().Add(offset) }
	// The timer path settles in 2 s; the request path keeps the timer out
	// of the way (a window is emitted once, by the request).
	settle := 2 * time.Second
	spec := h.memberSpec(offset)
	switch point {
	case killBetweenWindows:
		spec.HangPutAfter = 1
	case killBeforeReady:
		settle = time.Hour
		spec.HangProduceTopic = h.topic(topics.DigestReady)
	case killBeforeMark:
		// The window state written after the publish: revision 1,
		// emitted 1, not partial, Publishing cleared (a JSON object in
		// WindowState's field order, empty fields omitted).
		spec.HangProduceTopic = h.topic(topics.TradesDigestState)
		spec.HangProduceContains, spec.HangProduceExcludes = `{"revision":1,"emitted_revision":1,"last_change":`,
			[]string{`"emitted_partial"`, `"publishing"`}
	}
	spec.Settle = settle
	child := testkit.StartChild(t, memberEnv, spec)
	h.waitMembers(DigestName, 1)

	corpus := map[string][]Scored{"u1": digestCorpus()}
	var u2 []Trade
	for _, sc := range digestCorpus() {
		tr := sc.Trade
		tr.UserID, tr.ID = "u2", TradeID("u2", tr.Broker, tr.ExtID)
		u2 = append(u2, tr)
	}
	corpus["u2"] = Score(u2, time.Time{})
	var recs []*kgo.Record
	for _, u := range []string{"u1", "u2"} {
		for _, sc := range corpus[u] {
			rec, err := ScoredRecord(h.topic(topics.TradesBias), sc, now())
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
	}
	if point == killBeforeReady {
		for _, u := range []string{"u1", "u2"} {
			v, err := json.Marshal(Event[DigestRequest]{EventID: "dq-" + u, Type: TypeDigestRequest, Timestamp: now(),
				Payload: DigestRequest{UserID: u, PeriodStart: week0.StartDate()}})
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: h.topic(topics.TradesBias), Key: []byte(u), Value: v})
		}
	}
	// One batch: both windows change together and are due in one firing.
	if err := h.cl.ProduceSync(testkit.Context(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Both windows are usually emitted in one firing (or one batch of
	// requests), but may be split over two: the wait only needs the first
	// one under way.
	testkit.WaitFor(t, 60*time.Second, "the emission under way", func() bool {
		if point == killBeforeMark {
			return len(h.events(topics.DigestReady)) >= 1
		}
		_, ok1 := h.digestRow("u1", week0)
		_, ok2 := h.digestRow("u2", week0)
		return ok1 || ok2
	})
	before := len(h.events(topics.DigestReady))
	child.Kill(t)
	if point != killBeforeMark && before >= 2 {
		t.Fatalf("%d digest.ready before the kill: the kill came too late", before)
	}
	if point == killBeforeMark {
		// The kill came where it should: a window's publishing mark is on
		// the changelog, no state written after a publish is.
		marks := 0
		for _, r := range h.k.ReadTopic(t, h.topic(topics.TradesDigestState)) {
			e, err := decodeDigestEntry(r.Value)
			if err != nil || e.Window == nil || e.Window.EmittedRevision == 0 {
				continue
			}
			if !e.Window.Publishing {
				t.Fatalf("window state %s written after its publish before the kill: the hang missed it", r.Value)
			}
			marks++
		}
		if marks == 0 {
			t.Fatal("no publishing mark on the changelog before the kill")
		}
	}

	cfg := h.cfg
	cfg.Score.Now, cfg.Digest.Now, cfg.Digest.Settle = now, now, settle
	d := h.start(cfg)
	// The new member gets the partitions once the child's session (6 s)
	// expired, and its offsets and read_committed reads wait for the
	// transaction the child left open until the broker aborts it (the
	// runtime's 20 s transaction timeout): 30 s is short on a loaded
	// machine.
	h.waitEventsFor(topics.DigestReady, 2, 90*time.Second)
	moreFirings(t, d)
	moreFirings(t, d)
	ready := h.events(topics.DigestReady)
	for _, u := range []string{"u1", "u2"} {
		var history []Trade
		for _, sc := range corpus[u] {
			history = append(history, sc.Trade)
		}
		h.expectDigests(u, history, time.Time{}, ready, false)
	}
	t.Logf("digest.ready after the restart: %v", ids(ready))
}
