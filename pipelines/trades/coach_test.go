package trades

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// fakeCoach verifies signed requests the way the coach does, from the
// documented scheme (an implementation of its own, not the client's), and
// answers both endpoints.
type fakeCoach struct {
	t       *testing.T
	secrets map[string]string
	now     time.Time
	status  int // answer this instead when not 0

	mu       sync.Mutex
	nonces   map[string]bool
	requests []recorded
}

type recorded struct {
	header http.Header
	path   string
	body   []byte
}

func (f *fakeCoach) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, recorded{r.Header.Clone(), r.URL.Path, body})
	f.mu.Unlock()
	if reason := f.verify(r, body); reason != "" {
		http.Error(w, reason, http.StatusUnauthorized)
		return
	}
	if f.status != 0 {
		w.WriteHeader(f.status)
		return
	}
	switch r.URL.Path {
	case "/coach/v1/indicators":
		var in IndicatorsRequest
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, `{"features":{"points":%d,"rsi":55.5}}`, len(in.Series))
	case "/coach/v1/nlg/reflect":
		var in ReflectRequest
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, `{"insight":"%s: take a breath (%s)"}`, in.Labels[0].Name, in.Tone)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeCoach) verify(r *http.Request, body []byte) string {
	id, ts, nonce, sig := r.Header.Get("X-KeyId"), r.Header.Get("X-Timestamp"), r.Header.Get("X-Nonce"), r.Header.Get("X-Signature")
	secret, ok := f.secrets[id]
	if !ok {
		return "unknown key"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "bad timestamp"
	}
	if d := f.now.Sub(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return "skew"
	}
	bodySum := sha256.Sum256(body)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strings.Join([]string{id, ts, nonce, r.Method, r.URL.Path, hex.EncodeToString(bodySum[:])}, "\n")))
	want := mac.Sum(nil)
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, want) {
		return "bad signature"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(nonce) < 16 || f.nonces[nonce] {
		return "replay"
	}
	f.nonces[nonce] = true
	return ""
}

func newFakeCoach(t *testing.T, now time.Time) (*fakeCoach, *httptest.Server) {
	f := &fakeCoach{t: t, secrets: map[string]string{"k1": "s3cret"}, now: now, nonces: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func coachAt(t *testing.T, srv *httptest.Server, secret string, now time.Time) *Coach {
	t.Helper()
	c, err := NewCoach(CoachConfig{BaseURL: srv.URL + "/coach", KeyID: "k1", Secret: secret, HTTP: srv.Client(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCoachSignedCalls(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f, srv := newFakeCoach(t, now)
	c := coachAt(t, srv, "s3cret", now)
	ctx := context.Background()
	feats, err := c.Indicators(ctx, IndicatorsRequest{TradeID: "t1", Symbol: "BTC-USD", TS: now,
		Series: []SeriesPoint{{now.Add(-time.Hour), 1}, {now, 2}}})
	if err != nil || feats["points"] != 2 || feats["rsi"] != 55.5 {
		t.Fatalf("indicators %v, %v", feats, err)
	}
	insight, err := c.Reflect(ctx, ReflectRequest{TradeID: "t1", Labels: []LabelConfidence{{"overtrading", 0.5}}, Tone: ToneSupportive})
	if err != nil || insight != "overtrading: take a breath (supportive)" {
		t.Fatalf("reflect %q, %v", insight, err)
	}
	if len(f.requests) != 2 || f.requests[0].header.Get("X-Nonce") == f.requests[1].header.Get("X-Nonce") {
		t.Errorf("requests %+v: each needs its own nonce", f.requests)
	}
	if got := f.requests[0].header.Get("X-Timestamp"); got != strconv.FormatInt(now.Unix(), 10) {
		t.Errorf("timestamp %s", got)
	}
	for _, r := range f.requests {
		for k, v := range r.header {
			if strings.Contains(strings.Join(v, ","), "s3cret") {
				t.Errorf("header %s carries the secret", k)
			}
		}
	}
	if s := fmt.Sprintf("%v %#v", c, c); strings.Contains(s, "s3cret") {
		t.Errorf("printed %s", s)
	}
}

func TestCoachRejections(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f, srv := newFakeCoach(t, now)
	req := ReflectRequest{TradeID: "t1", Labels: []LabelConfidence{{"overtrading", 0.5}}, Tone: ToneStrict}
	cases := []struct {
		name   string
		c      *Coach
		reject bool
	}{
		{"4 min 59 s behind", coachAt(t, srv, "s3cret", now.Add(-5*time.Minute+time.Second)), false},
		{"5 min ahead", coachAt(t, srv, "s3cret", now.Add(5*time.Minute)), false},
		{"5 min 1 s behind", coachAt(t, srv, "s3cret", now.Add(-5*time.Minute-time.Second)), true},
		{"6 min ahead", coachAt(t, srv, "s3cret", now.Add(6*time.Minute)), true},
		{"wrong secret", coachAt(t, srv, "guess", now), true},
	}
	for _, c := range cases {
		_, err := c.c.Reflect(context.Background(), req)
		if !c.reject {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var ce *CoachError
		e := stages.Classify(err)
		if !errors.As(err, &ce) || ce.Status != 401 || e.Kind != stages.KindRetry || e.Rule != RuleAI {
			t.Errorf("%s: %v (%+v), want a retryable 401 with rule %s", c.name, err, e, RuleAI)
		}
	}

	// A captured request sent again is a replay.
	last := f.requests[0]
	r, _ := http.NewRequest(http.MethodPost, srv.URL+last.path, bytes.NewReader(last.body))
	r.Header = last.header
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(msg), "replay") {
		t.Errorf("replayed request: %d %s", resp.StatusCode, msg)
	}
	// The same request with its body changed fails the signature.
	r, _ = http.NewRequest(http.MethodPost, srv.URL+last.path, bytes.NewReader(append(bytes.Clone(last.body), ' ')))
	r.Header = last.header.Clone()
	r.Header.Set("X-Nonce", strings.Repeat("0", 32))
	resp, err = srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(msg), "bad signature") {
		t.Errorf("altered request: %d %s", resp.StatusCode, msg)
	}
}

func TestCoachFailuresAreRetryable(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f, srv := newFakeCoach(t, now)
	f.status = http.StatusServiceUnavailable
	_, err := coachAt(t, srv, "s3cret", now).Indicators(context.Background(), IndicatorsRequest{TradeID: "t"})
	var ce *CoachError
	if e := stages.Classify(err); !errors.As(err, &ce) || ce.Status != 503 || e.Kind != stages.KindRetry || e.Rule != RuleAI {
		t.Errorf("503: %v", err)
	}

	// A coach that does not answer within the timeout.
	// (It reads the body first: the server notices the client leaving
	// only once the body is consumed.)
	released := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-released:
		}
	}))
	defer hang.Close()
	defer close(released)
	c, err := NewCoach(CoachConfig{BaseURL: hang.URL, KeyID: "k1", Secret: "s", Timeout: 20 * time.Millisecond, HTTP: hang.Client()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Reflect(context.Background(), ReflectRequest{})
	if e := stages.Classify(err); !errors.Is(err, context.DeadlineExceeded) || e.Kind != stages.KindRetry || e.Rule != RuleAI {
		t.Errorf("timeout: %v", err)
	}

	for _, cfg := range []CoachConfig{
		{BaseURL: "ftp://coach", KeyID: "k", Secret: "s"},
		{BaseURL: "coach:8080", KeyID: "k", Secret: "s"},
		{BaseURL: "http://coach", Secret: "s"},
		{BaseURL: "http://coach", KeyID: "k"},
	} {
		if _, err := NewCoach(cfg); err == nil || strings.Contains(err.Error(), "s\"") {
			t.Errorf("config %+v accepted (%v)", cfg, err)
		}
	}
}
