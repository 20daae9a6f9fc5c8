package smap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/progress"
)

// Object keys of raw items are derived from the input: the platform of the
// target (or of the item, when the crawler sets one) becomes a directory
// and the start of the file name, raw/{slug}/{slug}-{hash}.json. A
// platform whose slug makes that file name longer than
// objstore.MaxSegmentLen fails its target (skipped, counted in
// smap_crawl_errors_total, like a target that cannot be crawled): the
// project completes with the other targets' items instead of its
// project.created being retried until it is dead-lettered and the project
// left CRAWLING forever. A store that refuses a key smap considers valid
// (objstore.ErrInvalidKey from Put, e.g. a prefix pushing it over a limit)
// dead-letters the project.created at once, sanity_fail with rule
// smap.object_key, instead of retrying it.
func TestUnstorableObjectKeys(t *testing.T) {
	pgs := testkit.NewPostgresServer(t)
	t.Run("LongPlatformFailsItsTarget", func(t *testing.T) { t.Parallel(); testLongPlatform(t, pgs) })
	t.Run("StoreRefusedKeyDeadLettered", func(t *testing.T) { t.Parallel(); testStoreRefusedKey(t, pgs) })
}

// maxPlatformSlug is the longest platform slug whose item object name
// ({slug}-{20 hex}.json) fits objstore.MaxSegmentLen.
const maxPlatformSlug = objstore.MaxSegmentLen - len("-01234567890123456789.json")

func testLongPlatform(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	longItemPlatform := strings.Repeat("N", 300)
	syn := &SyntheticCrawler{}
	// longitems:// targets yield items whose own platform is too long; the
	// crawler returns emit's error as the contract says (plain), ignores it
	// (ignore) or returns it classified as transient (retry).
	h.cfg.Crawler = crawlerFunc(func(ctx context.Context, p ProjectCreated, tg Target, emit func(Item) error) error {
		mode, ok := strings.CutPrefix(tg.URL, "longitems://")
		if !ok {
			return syn.Crawl(ctx, p, tg, emit)
		}
		for i := range 2 {
			err := emit(Item{SourceID: fmt.Sprint("long-", i), Platform: longItemPlatform, Text: "VF3 is good"})
			switch {
			case err == nil || mode == "ignore":
			case mode == "retry":
				return stages.Retry(err)
			default:
				return err
			}
		}
		return nil
	})
	d := h.start(h.cfg)
	const id = "p-long-platform"
	fits := strings.Repeat("x", maxPlatformSlug)      // file name of exactly 255 bytes
	tooLong := strings.Repeat("x", maxPlatformSlug+1) // 256 bytes
	veryLong := strings.Repeat("Ab", 150)             // 300 bytes, lowercased
	shortSlug := strings.Repeat("ü", 150) + "Zalo"    // 304 bytes, slug "zalo"
	h.createProject(ProjectCreated{ProjectID: id, Keywords: []string{"VF3"}, Targets: []Target{
		synthetic("tiktok", 3),
		{Platform: fits, URL: "synthetic://fits?items=2"},
		{Platform: tooLong, URL: "synthetic://toolong?items=2"},
		{Platform: veryLong, URL: "synthetic://verylong?items=2"},
		{Platform: shortSlug, URL: "synthetic://shortslug?items=2"},
		{Platform: "news", URL: "longitems://"},
		{Platform: "youtube", URL: "longitems://ignore"},
		{Platform: "facebook", URL: "longitems://retry"},
	}})
	var st progress.State
	testkit.WaitFor(t, 60*time.Second, "project DONE or a dead letter", func() bool {
		st = h.state(id)
		return st.Status == progress.StatusDone || h.count(h.cfg.AnalyticsErrorsTopic) > 0
	})
	for k, r := range h.dlqByKey() {
		t.Errorf("DLQ record %.40q: %v", k, testkit.Headers(r))
	}
	// 3 tiktok + 2 of the longest storable platform + 2 of the long
	// platform whose slug is short.
	const want = 7
	if st.Status != progress.StatusDone || st.Total != want || st.Done != want || st.Errors != 0 {
		t.Fatalf("final state %+v, want DONE total=done=%d errors=0", st, want)
	}
	if cs := h.completions(id); len(cs) != 1 || cs[0].Total != want || cs[0].Done != want || cs[0].Errors != 0 {
		t.Fatalf("completions %+v, want one with total=done=%d errors=0", cs, want)
	}
	ctx := testkit.Context(t)
	announced := map[string]bool{}
	for _, r := range h.k.ReadTopic(t, h.cfg.DataCollectedTopic) {
		e, err := DecodeDataCollected(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if e.Payload.ProjectID != id {
			continue
		}
		announced[e.Payload.ItemID] = true
		if err := objstore.ValidKey(e.Payload.ObjectKey); err != nil {
			t.Errorf("announced item %s with an invalid key: %v", e.Payload.ItemID, err)
		}
	}
	if len(announced) != want {
		t.Errorf("%d distinct items announced, want %d", len(announced), want)
	}
	for i := range 2 {
		itemID := ItemID(id, fits, fmt.Sprintf("%s-%05d", fits, i))
		key := ObjectKey(fits, itemID)
		if n := len(key[strings.LastIndexByte(key, '/')+1:]); n != objstore.MaxSegmentLen {
			t.Fatalf("boundary object name is %d bytes, want %d", n, objstore.MaxSegmentLen)
		}
		if !announced[itemID] {
			t.Errorf("item %d of the %d-byte platform not announced", i, len(fits))
		}
		if _, err := h.objects.Get(ctx, key); err != nil {
			t.Errorf("item %d of the %d-byte platform: raw object: %v", i, len(fits), err)
		}
	}
	if rows, failed := h.rows(id); rows != want || failed != 0 {
		t.Errorf("post_analytics: %d rows, %d failed; want %d, 0", rows, failed, want)
	}
	// The two too-long target platforms fold into "other"; the crawler's
	// long item platform fails the news, youtube and facebook targets,
	// whatever the crawler does with emit's error, and is not retried.
	for platform, want := range map[string]float64{"tiktok": 0, "zalo": 0, "other": 2, "news": 1, "youtube": 1, "facebook": 1} {
		if v := testkit.Metric(t, d.reg, "smap_crawl_errors_total", "platform", platform); v != want {
			t.Errorf("smap_crawl_errors_total{platform=%s} = %v, want %v", platform, v, want)
		}
	}
	if v := testkit.Metric(t, d.reg, "smap_crawl_retries_total"); v != 0 {
		t.Errorf("smap_crawl_retries_total = %v, want 0 (an unstorable key is permanent)", v)
	}
}

// putFaultStore refuses every Put of a key under prefix with
// objstore.ErrInvalidKey, like a store with stricter key rules, and counts
// those Puts.
type putFaultStore struct {
	objstore.Store
	prefix string
	mu     sync.Mutex
	puts   int
}

func (s *putFaultStore) Put(ctx context.Context, key string, data []byte, contentType string) error {
	if strings.HasPrefix(key, s.prefix) {
		s.mu.Lock()
		s.puts++
		s.mu.Unlock()
		return fmt.Errorf("objstore: put %s: refused by the test store: %w", key, objstore.ErrInvalidKey)
	}
	return s.Store.Put(ctx, key, data, contentType)
}

func (s *putFaultStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

func testStoreRefusedKey(t *testing.T, pgs *testkit.PostgresServer) {
	h := newHarness(t, pgs, harnessOpts{})
	fs := &putFaultStore{Store: h.objects, prefix: "raw/"}
	h.objects = fs
	h.start(h.cfg)
	const id = "p-store-refuses"
	p := ProjectCreated{ProjectID: id, Keywords: []string{"VF3"}, Targets: []Target{synthetic("tiktok", 3)}}
	h.createProject(p)
	var r *kgo.Record
	testkit.WaitFor(t, 60*time.Second, "the project.created dead-lettered", func() bool {
		r = h.dlqByKey()[id]
		return r != nil
	})
	hs := testkit.Headers(r)
	if hs[stages.HeaderReason] != string(stages.ReasonSanityFail) || hs[stages.HeaderRule] != RuleObjectKey ||
		hs[stages.HeaderStage] != CollectorName || hs[stages.HeaderSourceTopic] != h.cfg.ProjectCreatedTopic ||
		hs[stages.HeaderAttempts] != "1" || !strings.Contains(hs[stages.HeaderError], "invalid object key") {
		t.Errorf("DLQ headers %v; want sanity_fail, rule %s, stage %s, 1 attempt", hs, RuleObjectKey, CollectorName)
	}
	e, err := DecodeProjectCreated(r.Value)
	if err != nil || e.Payload.ProjectID != id {
		t.Errorf("DLQ value is not the original project.created: %v %+v", err, e.Payload)
	}
	if n := fs.count(); n != 1 {
		t.Errorf("%d refused raw-object Puts, want 1 (no retry)", n)
	}
	if n := h.count(h.cfg.DataCollectedTopic); n != 0 {
		t.Errorf("%d data.collected records, want none", n)
	}
}

// storeRetry: a key no store can hold is a sanity_fail dead letter (rule
// smap.object_key), a configuration error is fatal, anything else is
// retried.
func TestStoreRetryClassifies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		kind stages.Kind
	}{
		{"invalid key", fmt.Errorf("put: %w", objstore.ErrInvalidKey), stages.KindDeadLetter},
		{"access denied", minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied", BucketName: "b"}, stages.KindFatal},
		{"transient", errors.New("connection reset"), stages.KindRetry},
	} {
		got := stages.Classify(storeRetry("op", c.err))
		if got == nil || got.Kind != c.kind {
			t.Errorf("%s: classified %+v, want kind %v", c.name, got, c.kind)
			continue
		}
		if c.kind == stages.KindDeadLetter && (got.Reason != stages.ReasonSanityFail || got.Rule != RuleObjectKey) {
			t.Errorf("%s: dead letter %s/%s, want %s/%s", c.name, got.Reason, got.Rule, stages.ReasonSanityFail, RuleObjectKey)
		}
	}
}
