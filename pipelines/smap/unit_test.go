package smap

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/sluicehq/sluice/internal/testkit"
)

func analyse(t *testing.T, text string, keywords []string, it Item) Result {
	t.Helper()
	it.Text = text
	in := Input{Item: RawItem{Item: it}, Keywords: keywords, Tokens: tokenize(text)}
	var res Result
	for _, a := range Builtins() {
		if err := a.Analyze(&in, &res); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func TestAnalyzers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		text      string
		keywords  []string
		lang      string
		label     string
		score     float64
		mentioned []Mention
	}{
		{"vi positive", "Mình vừa lái thử VinFast VF3, thấy rất tốt và đáng mua.", []string{"VinFast", "VF3"}, "vi", "positive", 1, []Mention{{"VinFast", 1}, {"VF3", 1}}},
		{"vi negative", "Xe này lỗi nhiều quá, thật sự thất vọng về vinfast.", []string{"VinFast"}, "vi", "negative", -1, []Mention{{"VinFast", 1}}},
		{"vi negated positive", "Mình không thích chiếc xe này.", nil, "vi", "negative", -1, nil},
		{"vi NFD input", norm.NFD.String("Chiếc xe này rất đẹp và tuyệt vời"), nil, "vi", "positive", 1, nil},
		{"en positive", "I love the VF3, it is an excellent and amazing car.", []string{"VF3"}, "en", "positive", 1, []Mention{{"VF3", 1}}},
		{"en negative", "This is the worst purchase, broken and terrible.", nil, "en", "negative", -1, nil},
		{"en negated", "It is not good and I am not happy with the range.", nil, "en", "negative", -1, nil},
		{"en mixed", "Great design but the battery is bad.", nil, "en", "neutral", 0, nil},
		{"unknown neutral", "VF3 VF3 2025", []string{"vf3", "VF 3"}, "unknown", "neutral", 0, []Mention{{"vf3", 2}}},
		{"multi-word keyword", "The VF 3 and the vf 3 plus", []string{"VF 3"}, "en", "neutral", 0, []Mention{{"VF 3", 2}}},
		{"substring is not a mention", "VF35 is not VF3x", []string{"VF3"}, "en", "neutral", 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := analyse(t, c.text, c.keywords, Item{})
			if res.Language != c.lang || res.SentimentLabel != c.label || res.SentimentScore != c.score {
				t.Fatalf("got %s/%s/%v, want %s/%s/%v", res.Language, res.SentimentLabel, res.SentimentScore, c.lang, c.label, c.score)
			}
			if len(res.Mentions) != len(c.mentioned) {
				t.Fatalf("mentions %+v, want %+v", res.Mentions, c.mentioned)
			}
			for i := range c.mentioned {
				if res.Mentions[i] != c.mentioned[i] || res.Keywords[i] != c.mentioned[i].Keyword {
					t.Fatalf("mentions %+v keywords %v, want %+v", res.Mentions, res.Keywords, c.mentioned)
				}
			}
		})
	}
}

func TestEngagement(t *testing.T) {
	t.Parallel()
	cases := []struct {
		it   Item
		want float64
	}{
		{Item{}, 0},
		{Item{Likes: 10, Comments: 5, Shares: 2}, 3.2958},             // ln(1+26)
		{Item{Likes: 10, Comments: 5, Shares: 2, Views: 260}, 4.2958}, // + 10 × 26/260
		{Item{Likes: 100, Views: 10}, 14.6151},                        // rate capped at 1
		{Item{Likes: -5}, 0},                                          // negative counts ignored
		{Item{Likes: math.MaxInt64, Comments: 1}, 43.6683},            // no integer overflow (was NaN)
		{Item{Likes: math.MaxInt64, Comments: math.MaxInt64, Shares: math.MaxInt64, Views: math.MaxInt64}, 55.46},
		{Item{Comments: math.MinInt64, Views: -1}, 0},
	}
	for _, c := range cases {
		if got := analyse(t, "", nil, c.it).EngagementScore; got != c.want {
			t.Errorf("%+v: engagement %v, want %v", c.it, got, c.want)
		}
	}
}

func TestItemIDAndObjectKey(t *testing.T) {
	t.Parallel()
	a := ItemID("p1", "TikTok", "vid_888")
	if a != ItemID("p1", "tiktok", "vid_888") || !strings.HasPrefix(a, "tiktok-") || len(a) != len("tiktok-")+20 {
		t.Fatalf("item id %q is not deterministic or not normalised", a)
	}
	if a == ItemID("p2", "tiktok", "vid_888") || a == ItemID("p1", "tiktok", "vid_889") {
		t.Fatal("different items share an id")
	}
	if k := ObjectKey("TikTok", a); k != "raw/tiktok/"+a+".json" {
		t.Fatalf("object key %q", k)
	}
	if k := ObjectKey("../x y", "i"); k != "raw/xy/i.json" {
		t.Fatalf("unsafe platform kept: %q", k)
	}
}

func TestSyntheticCrawlerDeterministic(t *testing.T) {
	t.Parallel()
	p := ProjectCreated{ProjectID: "p", Keywords: []string{"VinFast"}}
	crawl := func() []Item {
		var out []Item
		err := (&SyntheticCrawler{}).Crawl(context.Background(), p, synthetic("tiktok", 15), func(it Item) error {
			out = append(out, it)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := crawl(), crawl()
	if len(a) != 15 {
		t.Fatalf("%d items, want 15", len(a))
	}
	langs := map[string]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("item %d differs between crawls", i)
		}
		if !strings.Contains(a[i].Text, "VinFast") {
			t.Fatalf("item %d does not mention the keyword: %q", i, a[i].Text)
		}
		langs[analyse(t, a[i].Text, nil, a[i]).Language]++
	}
	if langs["vi"] == 0 || langs["en"] == 0 || langs["unknown"] != 0 {
		t.Fatalf("languages of synthetic items: %v", langs)
	}
	// The emit error stops the crawl and is returned.
	stop := errors.New("stop")
	n := 0
	err := (&SyntheticCrawler{}).Crawl(context.Background(), p, Target{Platform: "x"}, func(Item) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("emit error: %v after %d items", err, n)
	}
}

func TestHTTPCrawler(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") != "sluice-smap/1" {
			http.Error(w, "no UA", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(`<html><head><style>p{}</style><script>var x=1;</script></head><body><p>VinFast VF3 &amp; <b>rất tốt</b></p></body></html>`))
		case "/big":
			w.Write([]byte(strings.Repeat("x", 2048)))
		case "/slow":
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
			}
		case "/missing":
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := &HTTPCrawler{Timeout: 200 * time.Millisecond, MaxBytes: 1024, HostDelay: 100 * time.Millisecond}
	crawl := func(path string) (Item, error) {
		var got Item
		err := c.Crawl(context.Background(), ProjectCreated{}, Target{Platform: "news", URL: srv.URL + path}, func(it Item) error {
			got = it
			return nil
		})
		return got, err
	}
	it, err := crawl("/page")
	if err != nil || it.Text != "VinFast VF3 & rất tốt" || it.SourceID != srv.URL+"/page" || it.Platform != "news" {
		t.Fatalf("page: %+v %v", it, err)
	}
	if _, err := crawl("/big"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big body: %v, want ErrTooLarge", err)
	}
	start := time.Now()
	if _, err := crawl("/slow"); err == nil || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("slow page: %v after %v, want a timeout", err, time.Since(start))
	}
	if _, err := crawl("/missing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("missing page: %v", err)
	}
	if _, err := crawl("ftp://x"); err == nil {
		t.Fatal("non-http target accepted")
	}
	// Politeness: concurrent requests to one host are issued at least
	// HostDelay apart (measured where the crawler hands them to the
	// transport; the bounds leave room for scheduling delays under load).
	rt := &recordingTransport{}
	pc := &HTTPCrawler{Client: &http.Client{Transport: rt}, HostDelay: 200 * time.Millisecond}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pc.Crawl(context.Background(), ProjectCreated{}, Target{URL: srv.URL + "/page"}, func(Item) error { return nil })
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	at := rt.times()
	if len(at) != 4 {
		t.Fatalf("%d requests, want 4", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 100*time.Millisecond {
			t.Fatalf("requests %d and %d issued %v apart, want about 200ms", i-1, i, gap)
		}
	}
	if span := at[3].Sub(at[0]); span < 450*time.Millisecond {
		t.Fatalf("4 requests issued within %v, want ≥ 3 × 200ms (minus scheduling slack)", span)
	}
}

type recordingTransport struct {
	mu sync.Mutex
	at []time.Time
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recordingTransport) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...)
}

func TestSchemeCrawlerRoutes(t *testing.T) {
	t.Parallel()
	var got []string
	rec := func(name string) Crawler {
		return crawlerFunc(func(context.Context, ProjectCreated, Target, func(Item) error) error {
			got = append(got, name)
			return nil
		})
	}
	s := SchemeCrawler{Synthetic: rec("syn"), HTTP: rec("http")}
	for _, u := range []string{"", "synthetic://x?items=1", "https://a.example/", "http://b.example/"} {
		if err := s.Crawl(context.Background(), ProjectCreated{}, Target{URL: u}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got, ",") != "syn,syn,http,http" {
		t.Fatalf("routes %v", got)
	}
	if err := s.Crawl(context.Background(), ProjectCreated{}, Target{URL: "ftp://x"}, nil); err == nil {
		t.Fatal("ftp target accepted")
	}
}

type crawlerFunc func(context.Context, ProjectCreated, Target, func(Item) error) error

func (f crawlerFunc) Crawl(ctx context.Context, p ProjectCreated, t Target, emit func(Item) error) error {
	return f(ctx, p, t, emit)
}

func TestDecodeRejectsIncompleteEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fn   func([]byte) error
		v    string
	}{
		{"project without id", func(b []byte) error { _, err := DecodeProjectCreated(b); return err }, `{"event_id":"e","payload":{}}`},
		{"collected without object", func(b []byte) error { _, err := DecodeDataCollected(b); return err }, `{"payload":{"project_id":"p","item_id":"i"}}`},
		{"finished without item", func(b []byte) error { _, err := DecodeAnalysisFinished(b); return err }, `{"payload":{"project_id":"p"}}`},
		{"not json", func(b []byte) error { _, err := DecodeDataCollected(b); return err }, `{`},
	} {
		if err := c.fn([]byte(c.v)); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// The state client on another logical database works on its own database
// and does not share base's push-notification processor (sharing it made
// go-redis fail to register the new client's handlers and log so on every
// start).
func TestStateClientOwnsItsOptions(t *testing.T) {
	t.Parallel()
	r := testkit.NewRedis(t, testkit.WithRedisDB(0))
	ctx := context.Background()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c, closeFn := StateClient(r.Client, Config{RedisDB: 1})
	t.Cleanup(func() { _ = closeFn() })
	key := r.Key("state")
	if err := c.Set(ctx, key, "db1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), key) })
	if n, err := r.Client.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("key written through the state client is on base's database (exists=%d, err=%v)", n, err)
	}
	if c.Options().DB != 1 {
		t.Fatalf("state client on DB %d, want 1", c.Options().DB)
	}
	if bp := r.Client.Options().PushNotificationProcessor; bp != nil && c.Options().PushNotificationProcessor == bp {
		t.Fatal("the state client shares base's push-notification processor")
	}
}
