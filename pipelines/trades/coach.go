package trades

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// AI coach endpoints.
const (
	CoachIndicatorsPath = "/v1/indicators"
	CoachReflectPath    = "/v1/nlg/reflect"
)

// Headers of a signed coach request.
const (
	HeaderKeyID     = "X-KeyId"
	HeaderTimestamp = "X-Timestamp"
	HeaderNonce     = "X-Nonce"
	HeaderSignature = "X-Signature"
)

// CoachMaxSkew is how far a request's X-Timestamp may be from the coach's
// clock, either way.
const CoachMaxSkew = 5 * time.Minute

// DefaultCoachTimeout is AI_TIMEOUT_MS's default.
const DefaultCoachTimeout = 2 * time.Second

// CoachConfig configures a Coach (AI_BASE_URL, AI_HMAC_KEY_ID,
// AI_HMAC_SECRET, AI_TIMEOUT_MS).
type CoachConfig struct {
	BaseURL string
	KeyID   string
	Secret  string
	// Timeout bounds each request (default DefaultCoachTimeout).
	Timeout time.Duration
	// HTTP is the client (default http.DefaultClient).
	HTTP *http.Client
	// Now is the clock that stamps requests (default time.Now).
	Now func() time.Time
}

// Coach is the client of the AI coach. Every request is a JSON POST signed
// with HMAC-SHA256: headers X-KeyId (the key id), X-Timestamp (Unix
// seconds), X-Nonce (32 random hex digits, new for every request) and
// X-Signature, the lower-case hex HMAC-SHA256 under the secret of
//
//	key_id "\n" timestamp "\n" nonce "\n" METHOD "\n" path "\n" hex(SHA-256(body))
//
// where path is the request URL's path. The coach rejects a timestamp more
// than CoachMaxSkew from its clock and a nonce it has seen. Failures are
// retryable errors with rule trades.ai (the runtime retries, then
// dead-letters as retries_exhausted). Safe for concurrent use; the secret
// is never logged or put in an error.
type Coach struct {
	base    *url.URL
	keyID   string
	secret  []byte
	timeout time.Duration
	http    *http.Client
	now     func() time.Time
}

// NewCoach checks cfg and returns a client.
func NewCoach(cfg CoachConfig) (*Coach, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("AI_BASE_URL must be an http or https URL")
	}
	if cfg.KeyID == "" || cfg.Secret == "" {
		return nil, errors.New("AI_HMAC_KEY_ID and AI_HMAC_SECRET are required with AI_BASE_URL")
	}
	c := &Coach{base: u, keyID: cfg.KeyID, secret: []byte(cfg.Secret), timeout: cfg.Timeout, http: cfg.HTTP, now: cfg.Now}
	if c.timeout <= 0 {
		c.timeout = DefaultCoachTimeout
	}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// SeriesPoint is one hourly close of a symbol.
type SeriesPoint struct {
	TS    time.Time `json:"ts"`
	Close float64   `json:"close"`
}

// IndicatorsRequest asks for the indicators of a trade's market context.
type IndicatorsRequest struct {
	TradeID string        `json:"trade_id"`
	Symbol  string        `json:"symbol"`
	TS      time.Time     `json:"ts"`
	Series  []SeriesPoint `json:"series"`
}

// ReflectRequest asks for an insight on a trade's labels.
type ReflectRequest struct {
	TradeID  string            `json:"trade_id"`
	Labels   []LabelConfidence `json:"labels"`
	Features map[string]any    `json:"features"`
	Tone     string            `json:"tone"`
}

// Indicators calls /v1/indicators and returns the features it computed.
func (c *Coach) Indicators(ctx context.Context, req IndicatorsRequest) (map[string]float64, error) {
	var out struct {
		Features map[string]float64 `json:"features"`
	}
	if err := c.post(ctx, CoachIndicatorsPath, req, &out); err != nil {
		return nil, err
	}
	return out.Features, nil
}

// Reflect calls /v1/nlg/reflect and returns the insight.
func (c *Coach) Reflect(ctx context.Context, req ReflectRequest) (string, error) {
	var out struct {
		Insight string `json:"insight"`
	}
	if err := c.post(ctx, CoachReflectPath, req, &out); err != nil {
		return "", err
	}
	return out.Insight, nil
}

// CoachError is a non-2xx answer of the coach.
type CoachError struct {
	Endpoint string
	Status   int
}

func (e *CoachError) Error() string {
	return fmt.Sprintf("AI coach %s answered HTTP %d", e.Endpoint, e.Status)
}

func (c *Coach) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("AI coach %s: encode request: %w", path, err)
	}
	u := c.base.JoinPath(path)
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("AI coach %s: %w", path, err)
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("AI coach %s: nonce: %w", path, err)
	}
	ts := strconv.FormatInt(c.now().Unix(), 10)
	n := hex.EncodeToString(nonce[:])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderKeyID, c.keyID)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderNonce, n)
	req.Header.Set(HeaderSignature, c.sign(ts, n, http.MethodPost, u.EscapedPath(), body))

	resp, err := c.http.Do(req)
	if err != nil {
		return aiRetry(fmt.Errorf("AI coach %s: %w", path, err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return aiRetry(fmt.Errorf("AI coach %s: read answer: %w", path, err))
	}
	if resp.StatusCode/100 != 2 {
		return aiRetry(&CoachError{Endpoint: path, Status: resp.StatusCode})
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return aiRetry(fmt.Errorf("AI coach %s: decode answer: %w", path, err))
	}
	return nil
}

func (c *Coach) sign(ts, nonce, method, path string, body []byte) string {
	sum := sha256.Sum256(body)
	mac := hmac.New(sha256.New, c.secret)
	fmt.Fprintf(mac, "%s\n%s\n%s\n%s\n%s\n%s", c.keyID, ts, nonce, method, path, hex.EncodeToString(sum[:]))
	return hex.EncodeToString(mac.Sum(nil))
}

func aiRetry(err error) error {
	return &stages.Error{Kind: stages.KindRetry, Rule: RuleAI, Err: err}
}

// String implements fmt.Stringer without the secret.
func (c *Coach) String() string { return "Coach{" + c.base.Redacted() + ", key " + c.keyID + "}" }

// GoString implements fmt.GoStringer without the secret.
func (c *Coach) GoString() string { return c.String() }
