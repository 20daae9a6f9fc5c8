package trades

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DigestsRoute is the ops-HTTP route that asks for a digest now.
const DigestsRoute = "POST /api/v1/trades/digests"

// Requester sends the requests of the score and digest services: the
// score.request and digest.request events (keyed by user id) and the
// re-publication of trade.scored from Postgres. Safe for concurrent use.
type Requester struct {
	cl                     *kgo.Client
	eventsTopic, biasTopic string
}

// NewRequester returns a requester producing with cl to eventsTopic
// (trades.events) and biasTopic (trades.bias).
func NewRequester(cl *kgo.Client, eventsTopic, biasTopic string) *Requester {
	return &Requester{cl: cl, eventsTopic: eventsTopic, biasTopic: biasTopic}
}

// RequestInputError is a request refused before anything is sent.
type RequestInputError struct{ Err error }

func (e *RequestInputError) Error() string { return e.Err.Error() }
func (e *RequestInputError) Unwrap() error { return e.Err }

// Sent is a request event that was produced and acknowledged.
type Sent struct {
	EventID   string `json:"event_id"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func send[P any](ctx context.Context, cl *kgo.Client, topic, key, typ string, p P, now time.Time) (Sent, error) {
	id := uuid.NewString()
	v, err := json.Marshal(Event[P]{EventID: id, Type: typ, Timestamp: now.UTC(), Payload: p})
	if err != nil {
		return Sent{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: v}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return Sent{}, fmt.Errorf("send %s for %s: %w", typ, key, err)
	}
	return Sent{EventID: id, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}, nil
}

// Score asks trades-score to score userID's trades since since (a date or
// an RFC 3339 time, not after today).
func (q *Requester) Score(ctx context.Context, userID, since string, now time.Time) (Sent, error) {
	if err := errors.Join(CheckUserID(userID), func() error { _, err := CheckSince(since, now); return err }()); err != nil {
		return Sent{}, &RequestInputError{Err: err}
	}
	return send(ctx, q.cl, q.eventsTopic, userID, TypeScoreRequest, ScoreRequest{UserID: userID, Since: since}, now)
}

// Digest asks trades-digest to emit userID's digest of window w now.
func (q *Requester) Digest(ctx context.Context, userID string, w Window, now time.Time) (Sent, error) {
	if err := CheckUserID(userID); err != nil {
		return Sent{}, &RequestInputError{Err: err}
	}
	return send(ctx, q.cl, q.biasTopic, userID, TypeDigestRequest, DigestRequest{UserID: userID, PeriodStart: w.StartDate()}, now)
}

// RebuildDigests re-publishes trade.scored for userID's trades with ts >=
// since, scored from the trades in db as trades-score scores them (same
// payloads, same event ids); trades-digest applies them idempotently. It
// returns how many it published.
func (q *Requester) RebuildDigests(ctx context.Context, db *pgxpool.Pool, userID string, since time.Time, now time.Time) (int, error) {
	if err := CheckUserID(userID); err != nil {
		return 0, &RequestInputError{Err: err}
	}
	history, err := LoadHistory(ctx, db, userID)
	if err != nil {
		return 0, err
	}
	scored := Score(history, since)
	recs := make([]*kgo.Record, 0, len(scored))
	for _, sc := range scored {
		rec, err := ScoredRecord(q.biasTopic, sc, now)
		if err != nil {
			return 0, err
		}
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := q.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("re-publish %d trade.scored of %s: %w", len(recs), userID, err)
	}
	return len(recs), nil
}

// DigestsRequest is the body of POST /api/v1/trades/digests: the user and
// the week, as an ISO week ("2025-W02") or its Monday ("2025-01-06").
type DigestsRequest struct {
	UserID      string `json:"user_id"`
	Week        string `json:"week,omitempty"`
	PeriodStart string `json:"period_start,omitempty"`
}

// DigestsAccepted is the answer of POST /api/v1/trades/digests (202).
type DigestsAccepted struct {
	Sent
	UserID string `json:"user_id"`
	Period Period `json:"period"`
}

// RequestedWindow returns the window of r: Week (YYYY-Www) or
// PeriodStart (a Monday), exactly one of them.
func (r DigestsRequest) RequestedWindow() (Window, error) {
	switch {
	case r.Week != "" && r.PeriodStart != "":
		return Window{}, errors.New("give week or period_start, not both")
	case r.Week != "":
		return ParseISOWeek(r.Week)
	case r.PeriodStart != "":
		return WindowStarting(r.PeriodStart)
	}
	return Window{}, errors.New("week (YYYY-Www) or period_start (YYYY-MM-DD, a Monday) is required")
}

// DigestsHandler serves POST /api/v1/trades/digests: it sends a
// digest.request and answers 202 with its event id, 400 for bad input and
// 503 when Kafka does not acknowledge.
func DigestsHandler(q *Requester, now func() time.Time) http.Handler {
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := func(code int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(v)
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			reply(http.StatusBadRequest, map[string]string{"error": "read body: " + err.Error()})
			return
		}
		var req DigestsRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			reply(http.StatusBadRequest, map[string]string{"error": "body must be JSON {user_id, week | period_start}: " + err.Error()})
			return
		}
		win, err := req.RequestedWindow()
		if err != nil {
			reply(http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		sent, err := q.Digest(r.Context(), req.UserID, win, now())
		var ie *RequestInputError
		switch {
		case errors.As(err, &ie):
			reply(http.StatusBadRequest, map[string]string{"error": ie.Error()})
		case err != nil:
			reply(http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		default:
			reply(http.StatusAccepted, DigestsAccepted{Sent: sent, UserID: req.UserID, Period: win.Period()})
		}
	})
}
