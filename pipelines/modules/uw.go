package modules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// DefaultUWBaseURL is the Unusual Whales API (UW_BASE_URL).
const DefaultUWBaseURL = "https://api.unusualwhales.com"

// DefaultUWPaths returns the Unusual Whales endpoints of the modules,
// {ticker} standing for the upper-cased ticker.
func DefaultUWPaths() map[string]string {
	return map[string]string{
		ModuleOptionsFlow:   "/api/stock/{ticker}/flow-recent",
		ModuleDarkPool:      "/api/darkpool/{ticker}",
		ModuleShortInterest: "/api/shorts/{ticker}/interest-float",
		ModulePriceAction:   "/api/stock/{ticker}/ohlc/5m",
	}
}

// UWConfig configures the Unusual Whales adapter.
type UWConfig struct {
	// BaseURL is UW_BASE_URL (default DefaultUWBaseURL); http or https,
	// without query.
	BaseURL string
	// APIKey is UW_API_KEY, sent as a bearer token. Required. It is a
	// secret: no error of the adapter contains it.
	APIKey string
	// Paths maps modules to path templates; nil uses DefaultUWPaths.
	Paths map[string]string
	// Client makes the requests; nil uses a client whose timeout is
	// UpstreamTimeout.
	Client *http.Client
	// Now is the clock for an HTTP-date Retry-After (default time.Now).
	Now func() time.Time
}

// UW is the Unusual Whales ModuleSource: one GET per fetch, JSON answers
// of at most MaxPayloadBytes; an error status is an *UpstreamError with
// its Retry-After (seconds or an HTTP date). Its snapshots carry no data
// date. Safe for concurrent use.
type UW struct {
	base   *url.URL
	key    string
	paths  map[string]string
	client *http.Client
	now    func() time.Time
}

// NewUW checks cfg and returns the adapter. It makes no request.
func NewUW(cfg UWConfig) (*UW, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("modules: Unusual Whales source: UW_API_KEY is empty")
	}
	raw := cfg.BaseURL
	if raw == "" {
		raw = DefaultUWBaseURL
	}
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.RawQuery != "" {
		return nil, fmt.Errorf("modules: Unusual Whales source: UW_BASE_URL %q is not an http(s) URL without query", raw)
	}
	u := &UW{base: base, key: cfg.APIKey, paths: cfg.Paths, client: cfg.Client, now: cfg.Now}
	if u.paths == nil {
		u.paths = DefaultUWPaths()
	}
	if u.client == nil {
		u.client = &http.Client{Timeout: UpstreamTimeout}
	}
	if u.now == nil {
		u.now = time.Now
	}
	return u, nil
}

// Fetch implements ModuleSource.
func (u *UW) Fetch(ctx context.Context, ticker, module string) (Snapshot, error) {
	tmpl, ok := u.paths[module]
	if !ok {
		return Snapshot{}, fmt.Errorf("uw: %q: %w", module, ErrUnsupportedModule)
	}
	target := u.base.JoinPath(strings.ReplaceAll(tmpl, "{ticker}", url.PathEscape(NormalizeTicker(ticker))))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("uw %s %s: %w", module, ticker, err)
	}
	req.Header.Set("Authorization", "Bearer "+u.key)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sluice-modules")
	resp, err := u.client.Do(req)
	if err != nil {
		return Snapshot{}, fmt.Errorf("uw %s %s: %w", module, ticker, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxPayloadBytes+1))
	if err != nil {
		return Snapshot{}, fmt.Errorf("uw %s %s: read answer: %w", module, ticker, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Snapshot{}, &UpstreamError{Status: resp.StatusCode, RetryAfter: stages.ParseRetryAfter(resp.Header.Get("Retry-After"), u.now()),
			Message: clip(u.redact(strings.TrimSpace(string(body))))}
	}
	switch {
	case len(body) > MaxPayloadBytes:
		return Snapshot{}, fmt.Errorf("uw %s %s: more than %d bytes: %w", module, ticker, MaxPayloadBytes, ErrPayloadTooLarge)
	case !json.Valid(body):
		return Snapshot{}, fmt.Errorf("uw %s %s: %q: %w", module, ticker, clip(u.redact(string(body))), ErrInvalidPayload)
	}
	return Snapshot{Payload: body}, nil
}

// redact removes the API key from a text the upstream sent back.
func (u *UW) redact(s string) string { return strings.ReplaceAll(s, u.key, "xxxxx") }
