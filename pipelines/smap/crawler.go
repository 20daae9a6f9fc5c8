package smap

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Item is one post, video or page found by a crawler.
type Item struct {
	// SourceID identifies the item on its platform (a post id, a URL). It
	// must be stable: the item id is derived from it (see ItemID).
	SourceID    string    `json:"source_id"`
	Platform    string    `json:"platform"`
	URL         string    `json:"url,omitempty"`
	Author      string    `json:"author,omitempty"`
	Text        string    `json:"text"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	Likes       int64     `json:"likes"`
	Comments    int64     `json:"comments"`
	Shares      int64     `json:"shares"`
	Views       int64     `json:"views"`
}

// RawItem is the JSON stored at raw/{platform}/{item}.json.
type RawItem struct {
	ItemID    string    `json:"item_id"`
	ProjectID string    `json:"project_id"`
	CrawledAt time.Time `json:"crawled_at"`
	Item
}

// Crawler discovers and fetches the items of one target of a project.
// Crawl calls emit once per item, in discovery order, and stops at the
// first emit error (returning it). Implementations must be safe for
// concurrent use and should be deterministic in SourceID: crawling the same
// target again finds the same items with the same source ids, so that a
// redelivered project is counted once.
type Crawler interface {
	Crawl(ctx context.Context, p ProjectCreated, target Target, emit func(Item) error) error
}

// SyntheticCrawler generates deterministic items for tests, benchmarks and
// the demo: the same project and target always yield the same items
// (source ids, texts in Vietnamese or English mentioning the project's
// keywords, sentiment words and engagement counts). A target URL
// "synthetic://PLATFORM?items=N" sets the number of items, otherwise
// ItemsPerTarget applies.
type SyntheticCrawler struct {
	// ItemsPerTarget is the default item count per target (default 20).
	ItemsPerTarget int
	// Delay is waited before each item, to simulate a slow crawl.
	Delay time.Duration
}

var (
	viPositive = []string{"rất tốt", "tuyệt vời", "đẹp quá", "rất thích", "hài lòng", "đáng mua", "xuất sắc"}
	viNegative = []string{"thất vọng", "quá tệ", "lỗi nhiều", "rất kém", "đắt quá", "không thích", "chán"}
	viNeutral  = []string{"mới ra mắt", "giá bán", "thông số", "lái thử", "cuối tuần"}
	enPositive = []string{"really good", "amazing", "love it", "great value", "excellent", "highly recommend"}
	enNegative = []string{"disappointed", "terrible", "broken again", "too expensive", "worst", "poor quality"}
	enNeutral  = []string{"just launched", "the price", "specs", "test drive", "this weekend"}
)

// Crawl implements Crawler.
func (c *SyntheticCrawler) Crawl(ctx context.Context, p ProjectCreated, target Target, emit func(Item) error) error {
	n := c.ItemsPerTarget
	if n <= 0 {
		n = 20
	}
	if target.URL != "" {
		u, err := url.Parse(target.URL)
		if err != nil {
			return fmt.Errorf("synthetic crawler: target %q: %w", target.URL, err)
		}
		if s := u.Query().Get("items"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 {
				return fmt.Errorf("synthetic crawler: target %q: bad items=%q", target.URL, s)
			}
			n = v
		}
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s", p.ProjectID, target.Platform, target.URL)
	seed := h.Sum64()
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		if c.Delay > 0 {
			t := time.NewTimer(c.Delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		it := Item{
			SourceID:    fmt.Sprintf("%s-%05d", platformSlug(target.Platform), i),
			Platform:    target.Platform,
			URL:         fmt.Sprintf("https://%s.example/post/%d", platformSlug(target.Platform), i),
			Author:      fmt.Sprintf("user%03d", rng.IntN(500)),
			Text:        syntheticText(rng, p.Keywords),
			PublishedAt: base.Add(time.Duration(rng.IntN(60*24)) * time.Hour),
			Likes:       int64(rng.IntN(5000)),
			Comments:    int64(rng.IntN(400)),
			Shares:      int64(rng.IntN(200)),
			Views:       int64(5000 + rng.IntN(100000)),
		}
		if err := emit(it); err != nil {
			return err
		}
	}
	return nil
}

func syntheticText(rng *rand.Rand, keywords []string) string {
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	kw := "sản phẩm"
	vi := rng.IntN(3) != 0 // two thirds Vietnamese
	if !vi {
		kw = "the product"
	}
	if len(keywords) > 0 {
		kw = keywords[rng.IntN(len(keywords))]
	}
	mood := rng.IntN(3) // 0 positive, 1 negative, 2 neutral
	if vi {
		var w string
		switch mood {
		case 0:
			w = pick(viPositive)
		case 1:
			w = pick(viNegative)
		default:
			w = pick(viNeutral)
		}
		return fmt.Sprintf("Mình vừa xem %s, thấy %s. Các bạn nghĩ sao về %s này? Đây là ý kiến của mình và %s.", kw, w, kw, pick(viNeutral))
	}
	var w string
	switch mood {
	case 0:
		w = pick(enPositive)
	case 1:
		w = pick(enNegative)
	default:
		w = pick(enNeutral)
	}
	return fmt.Sprintf("I just checked out %s and it is %s. What do you think about the %s? This is my take on %s.", kw, w, pick(enNeutral), kw)
}

// HTTPCrawler fetches each target URL as one item: the page's text (tags
// stripped from HTML) becomes the item text and the URL its source id. It
// is polite: requests to one host are released at least HostDelay apart,
// across all goroutines using the crawler. It is safe for concurrent use.
type HTTPCrawler struct {
	// Client is the HTTP client (default: a client with Timeout).
	Client *http.Client
	// Timeout bounds each request, body included (default 10s).
	Timeout time.Duration
	// MaxBytes is the largest body accepted; a larger one fails the target
	// (default 1 MiB).
	MaxBytes int64
	// HostDelay is the minimum gap between two requests to one host
	// (default 1s).
	HostDelay time.Duration
	// UserAgent is sent with every request (default "sluice-smap/1").
	UserAgent string

	mu    sync.Mutex
	hosts map[string]*hostGate
}

// ErrTooLarge is returned (wrapped) for a body larger than MaxBytes.
var ErrTooLarge = errors.New("response body too large")

// Crawl implements Crawler.
func (c *HTTPCrawler) Crawl(ctx context.Context, _ ProjectCreated, target Target, emit func(Item) error) error {
	u, err := url.Parse(target.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("http crawler: target %q is not an absolute http(s) URL", target.URL)
	}
	if err := c.wait(ctx, u.Host); err != nil {
		return err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("http crawler: %w", err)
	}
	ua := c.UserAgent
	if ua == "" {
		ua = "sluice-smap/1"
	}
	req.Header.Set("User-Agent", ua)
	cl := c.Client
	if cl == nil {
		cl = &http.Client{Timeout: timeout}
	}
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("http crawler: GET %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("http crawler: GET %s: status %s", u.Redacted(), resp.Status)
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("http crawler: read %s: %w", u.Redacted(), err)
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("http crawler: %s: %w (limit %d bytes)", u.Redacted(), ErrTooLarge, limit)
	}
	text := string(body)
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "html") || strings.HasPrefix(strings.TrimSpace(text), "<") {
		text = htmlText(text)
	}
	return emit(Item{SourceID: u.String(), Platform: target.Platform, URL: u.String(), Text: text})
}

// hostGate serialises the requests to one host: sem is held while a
// request waits for its turn, last is when the previous one was released.
type hostGate struct {
	sem  chan struct{}
	last time.Time
}

// wait blocks until a request to host may be sent: at least HostDelay after
// the previous request to that host was released, whatever the scheduling
// of the goroutines (the gap is measured from the actual release time).
func (c *HTTPCrawler) wait(ctx context.Context, host string) error {
	delay := c.HostDelay
	if delay <= 0 {
		delay = time.Second
	}
	c.mu.Lock()
	if c.hosts == nil {
		c.hosts = map[string]*hostGate{}
	}
	g := c.hosts[host]
	if g == nil {
		g = &hostGate{sem: make(chan struct{}, 1)}
		c.hosts[host] = g
	}
	c.mu.Unlock()
	select {
	case g.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.sem }()
	if d := time.Until(g.last.Add(delay)); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	g.last = time.Now()
	return nil
}

var (
	reScript = regexp.MustCompile(`(?is)<(script|style)[^>]*>.*?</(script|style)>`)
	reTag    = regexp.MustCompile(`(?s)<[^>]*>`)
	reSpace  = regexp.MustCompile(`\s+`)
)

// htmlText is a crude HTML-to-text conversion: scripts and styles removed,
// tags replaced by spaces, common entities decoded, whitespace collapsed.
func htmlText(s string) string {
	s = reScript.ReplaceAllString(s, " ")
	s = reTag.ReplaceAllString(s, " ")
	s = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&quot;", `"`, "&#39;", "'", "&nbsp;", " ").Replace(s)
	return strings.TrimSpace(reSpace.ReplaceAllString(s, " "))
}

// SchemeCrawler routes each target by the scheme of its URL: http and
// https to HTTP, synthetic (or no URL) to Synthetic. A target whose route
// is nil fails.
type SchemeCrawler struct {
	Synthetic Crawler
	HTTP      Crawler
}

// Crawl implements Crawler.
func (s SchemeCrawler) Crawl(ctx context.Context, p ProjectCreated, target Target, emit func(Item) error) error {
	var c Crawler
	switch {
	case target.URL == "" || strings.HasPrefix(target.URL, "synthetic:"):
		c = s.Synthetic
	case strings.HasPrefix(target.URL, "http://"), strings.HasPrefix(target.URL, "https://"):
		c = s.HTTP
	}
	if c == nil {
		return fmt.Errorf("no crawler for target %q", target.URL)
	}
	return c.Crawl(ctx, p, target, emit)
}
