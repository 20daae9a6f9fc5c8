package smap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/stages"
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
//
// A failure that may pass (a timeout, a dropped connection, an HTTP 5xx or
// 429) should be returned classified with stages.Retry, or with
// stages.RetryAfter carrying the wait the site asked for: the collector
// crawls the target again, with backoff and jitter, up to
// Config.CrawlRetry.MaxAttempts crawls (see there). Any other error — and
// a panic — is permanent: the target is skipped at once. A retried crawl
// starts the target over; the items it emitted before failing are emitted
// again and, having the same source ids, counted once.
type Crawler interface {
	Crawl(ctx context.Context, p ProjectCreated, target Target, emit func(Item) error) error
}

// SyntheticCrawler generates deterministic items for tests, benchmarks and
// the demo: the same project and target always yield the same items
// (source ids, texts in Vietnamese or English mentioning the project's
// keywords, sentiment words and engagement counts). A target URL
// "synthetic://PLATFORM?items=N" sets the number of items, otherwise
// ItemsPerTarget applies.
//
// Failures can be injected with more query parameters:
//   - fail=N: the first N crawls of the target (per project, counted by
//     this crawler value) fail with a transient error (stages.Retry, like
//     an HTTP 503), the next ones succeed;
//   - fail=permanent: every crawl of the target fails with a permanent
//     error;
//   - fail_after=K: a failing crawl emits its first K items before it
//     fails (default 0).
//
// The zero value is ready to use; a SyntheticCrawler must not be copied
// after its first Crawl.
type SyntheticCrawler struct {
	// ItemsPerTarget is the default item count per target (default 20).
	ItemsPerTarget int
	// Delay is waited before each item, to simulate a slow crawl.
	Delay time.Duration

	mu    sync.Mutex
	crawl map[string]int // crawls so far of each target with fail=N
}

// ErrInjected is wrapped by the failures SyntheticCrawler injects.
var ErrInjected = errors.New("injected crawl failure")

// syntheticFailure is a target's failure injection (see SyntheticCrawler).
type syntheticFailure struct {
	transient int  // fail=N
	permanent bool // fail=permanent
	after     int  // fail_after=K
}

func parseSyntheticFailure(target string, q url.Values) (syntheticFailure, error) {
	var f syntheticFailure
	switch s := q.Get("fail"); s {
	case "":
	case "permanent":
		f.permanent = true
	default:
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return f, fmt.Errorf("synthetic crawler: target %q: bad fail=%q (want a count or \"permanent\")", target, s)
		}
		f.transient = v
	}
	if s := q.Get("fail_after"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return f, fmt.Errorf("synthetic crawler: target %q: bad fail_after=%q", target, s)
		}
		f.after = v
	}
	return f, nil
}

// injected returns the error the current crawl of the target must fail
// with, or nil.
func (c *SyntheticCrawler) injected(p ProjectCreated, target Target, f syntheticFailure) error {
	if f.permanent {
		return fmt.Errorf("synthetic crawler: target %q: 404 Not Found: %w", target.URL, ErrInjected)
	}
	if f.transient == 0 {
		return nil
	}
	k := p.ProjectID + "\x00" + target.Platform + "\x00" + target.URL
	c.mu.Lock()
	if c.crawl == nil {
		c.crawl = map[string]int{}
	}
	c.crawl[k]++
	n := c.crawl[k]
	c.mu.Unlock()
	if n > f.transient {
		return nil
	}
	return stages.Retry(fmt.Errorf("synthetic crawler: target %q: 503 Service Unavailable (crawl %d of %d failing): %w", target.URL, n, f.transient, ErrInjected))
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
	var fail syntheticFailure
	if target.URL != "" {
		u, err := url.Parse(target.URL)
		if err != nil {
			return fmt.Errorf("synthetic crawler: target %q: %w", target.URL, err)
		}
		q := u.Query()
		if s := q.Get("items"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 {
				return fmt.Errorf("synthetic crawler: target %q: bad items=%q", target.URL, s)
			}
			n = v
		}
		if fail, err = parseSyntheticFailure(target.URL, q); err != nil {
			return err
		}
	}
	failErr := c.injected(p, target, fail)
	if failErr != nil && fail.after < n {
		n = fail.after
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
	return failErr
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
	// The words of the text's language, per mood: positive, negative,
	// neutral.
	words := [3][]string{enPositive, enNegative, enNeutral}
	if vi {
		words = [3][]string{viPositive, viNegative, viNeutral}
	}
	mood := rng.IntN(3)
	w := pick(words[mood])
	if vi {
		return fmt.Sprintf("Mình vừa xem %s, thấy %s. Các bạn nghĩ sao về %s này? Đây là ý kiến của mình và %s.", kw, w, kw, pick(words[2]))
	}
	return fmt.Sprintf("I just checked out %s and it is %s. What do you think about the %s? This is my take on %s.", kw, w, pick(words[2]), kw)
}

// HTTPCrawler fetches each target URL as one item: the page's text (tags
// stripped from HTML) becomes the item text and the URL its source id. It
// is polite: requests to one host are released at least HostDelay apart,
// across all goroutines using the crawler. It is safe for concurrent use.
//
// Failures that may pass are returned as stages.Retry (see Crawler and
// Config.CrawlRetry): timeouts, refused, reset or dropped connections, DNS
// failures other than an unknown host, and the statuses 408, 425, 429 and
// 5xx except 501 and 505 — with the Retry-After header's wait, when sent,
// as stages.RetryAfter. Other statuses (404, 403…), a body over MaxBytes,
// certificate errors and a target that is not an http(s) URL are
// permanent.
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
		err = fmt.Errorf("http crawler: GET %s: %w", u.Redacted(), err)
		if ctx.Err() == nil && transportTransient(err) {
			return stages.Retry(err)
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("http crawler: GET %s: status %s", u.Redacted(), resp.Status)
		if statusTransient(resp.StatusCode) {
			return stages.RetryAfter(stages.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), err)
		}
		return err
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		err = fmt.Errorf("http crawler: read %s: %w", u.Redacted(), err)
		if ctx.Err() == nil {
			return stages.Retry(err) // the connection broke or timed out mid-body
		}
		return err
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

// statusTransient reports whether an HTTP status may pass on a later
// request: 408 Request Timeout, 425 Too Early, 429 Too Many Requests and
// the 5xx server errors but 501 Not Implemented and 505 HTTP Version Not
// Supported.
func statusTransient(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return true
	case code == http.StatusNotImplemented, code == http.StatusHTTPVersionNotSupported:
		return false
	default:
		return code >= 500 && code <= 599
	}
}

// transportTransient reports whether a failed request (no response) may
// pass on a later one: a timeout, a refused, reset or dropped connection,
// or a DNS failure other than "no such host". TLS certificate errors,
// unknown hosts, bad redirects and the like are permanent.
func transportTransient(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return !dnsErr.IsNotFound
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op != "remote error" // a TLS alert from the server
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
