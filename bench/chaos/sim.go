package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/pipelines/trades"
)

// Sim traffic of the trades workload: calls of the sim's API route
// (GET /api/v1/trades/{user}/trades/{trade}/sim?horizon_days=7, served by
// `sluice run trades` on its ops server) across the fault, one at a time.
// The trades called are a user's of its own (simUser), stored before the
// members start so that their history — and so every answer — is fixed;
// the sim caches an answer in Redis for an hour (the pipeline's only Redis
// use) and reads the trade and its history from PostgreSQL.
const (
	simHorizonDays = 7
	// simEvery is the pause between two calls.
	simEvery = 150 * time.Millisecond
	// simNewKeyEvery is how often one more trade joins the called ones: a
	// cache miss, a vendor call behind the marketdata limiter (per symbol:
	// 2 a second, 20 a minute, 60 in 10 minutes), so they are spaced out.
	simNewKeyEvery = 4 * time.Second
	// simBound is the longest a call may take, answered or not (a hang).
	simBound = 10 * time.Second
	// simGrace is how long after the fault's end an error still counts as
	// the outage's (a pooled connection found broken, a retry).
	simGrace = 5 * time.Second
)

// simCall is one sim call: when it began and how long it took, the trade,
// the HTTP status (0: no answer, err says why), and the body.
type simCall struct {
	at     time.Time
	took   time.Duration
	trade  string
	status int
	body   []byte
	err    error
}

// simTraffic calls the sim of user's trades on a member while the scenario
// runs. The call log is guarded by mu.
type simTraffic struct {
	user   string
	trades []string          // called in this order, one more every simNewKeyEvery
	want   map[string][]byte // reference answer per trade (JSON, cached false)
	base   string            // the member's ops server
	stop   context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	calls []simCall
}

// seedSimUser stores the synthetic broker's trades of user (since, the
// import's since) in the trades table, as an import would, and returns
// their ids in time order.
func seedSimUser(ctx context.Context, sc *scene, user, since string) ([]string, error) {
	sinceT, err := time.Parse(time.DateOnly, since)
	if err != nil {
		return nil, err
	}
	syn := trades.NewSynthetic()
	b := &pgx.Batch{}
	var ts []trades.Trade
	for cursor := ""; ; {
		p, err := syn.FetchTrades(ctx, trades.FetchRequest{UserID: user, Since: sinceT, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("synthetic trades of %s: %w", user, err)
		}
		for _, raw := range p.Trades {
			t, err := raw.Normalize(user, trades.BrokerSynthetic, time.Now())
			if err != nil {
				return nil, fmt.Errorf("synthetic trade of %s: %w", user, err)
			}
			ts = append(ts, t)
			b.Queue(`INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
				t.ID, t.UserID, t.Broker, t.ExtID, t.Symbol, string(t.Side), t.Qty.String(), t.Price.String(), t.Fee.String(), t.TS)
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if err := sc.db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("store the trades of %s: %w", user, err)
	}
	trades.SortHistory(ts)
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids, nil
}

// newSimTraffic computes the reference answer of every trade of ids (the
// sim's pure function on the stored history and the synthetic vendor's
// bars, no cache) and returns the traffic, not started.
func newSimTraffic(ctx context.Context, sc *scene, user string, ids []string) (*simTraffic, error) {
	st := &simTraffic{user: user, trades: ids, want: map[string][]byte{}}
	store := trades.PGTrades{DB: sc.db}
	horizon := time.Duration(simHorizonDays) * 24 * time.Hour
	for _, id := range ids {
		t, err := store.Trade(ctx, user, id)
		if err != nil {
			return nil, err
		}
		history, err := store.SymbolHistory(ctx, user, t.Symbol, t.TS.Add(horizon))
		if err != nil {
			return nil, err
		}
		bars, err := trades.SyntheticMarketData{}.Bars(ctx, t.Symbol, t.TS, t.TS.Add(horizon))
		if err != nil {
			return nil, err
		}
		res := trades.Simulate(t, history, bars, horizon)
		// The schema's market_bars is empty: the vendor's bars are used.
		res.HorizonDays, res.Source = simHorizonDays, trades.SourceMarketData
		b, err := json.Marshal(res)
		if err != nil {
			return nil, err
		}
		st.want[id] = b
	}
	return st, nil
}

// start calls the sim on the member at base until stop: round robin over
// the trades joined so far, one call every simEvery, one more trade every
// simNewKeyEvery.
func (st *simTraffic) start(base string) {
	st.base = base
	ctx, cancel := context.WithCancel(context.Background())
	st.stop, st.done = cancel, make(chan struct{})
	client := &http.Client{Timeout: simBound}
	go func() {
		defer close(st.done)
		began := time.Now()
		for i := 0; ctx.Err() == nil; i++ {
			joined := min(len(st.trades), 1+int(time.Since(began)/simNewKeyEvery))
			id := st.trades[i%joined]
			// A newly joined trade is called at once.
			if i > 0 && joined > 1 && !st.called(st.trades[joined-1]) {
				id = st.trades[joined-1]
			}
			c := st.call(ctx, client, id)
			if ctx.Err() != nil && c.err != nil {
				return // cut by stop
			}
			st.mu.Lock()
			st.calls = append(st.calls, c)
			st.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(simEvery):
			}
		}
	}()
}

func (st *simTraffic) called(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.calls {
		if c.trade == id {
			return true
		}
	}
	return false
}

func (st *simTraffic) call(ctx context.Context, client *http.Client, id string) simCall {
	c := simCall{at: time.Now(), trade: id}
	defer func() { c.took = time.Since(c.at) }()
	url := fmt.Sprintf("%s/api/v1/trades/%s/trades/%s/sim?horizon_days=%d", st.base, st.user, id, simHorizonDays)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		c.err = err
		return c
	}
	resp, err := client.Do(req)
	if err != nil {
		c.err = err
		c.took = time.Since(c.at)
		return c
	}
	defer resp.Body.Close()
	c.status = resp.StatusCode
	c.body, c.err = io.ReadAll(resp.Body)
	c.took = time.Since(c.at)
	return c
}

// ready reports whether a cached answer came back: the fault may begin.
func (st *simTraffic) ready() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range st.calls {
		if c.status == http.StatusOK && answerCached(c.body) {
			return true
		}
	}
	return false
}

// end stops the calls and returns them.
func (st *simTraffic) end() []simCall {
	st.once.Do(func() {
		if st.stop != nil {
			st.stop()
			<-st.done
		}
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]simCall(nil), st.calls...)
}

// answerCached reads the "cached" field of a sim answer.
func answerCached(body []byte) bool {
	var a struct {
		Cached bool `json:"cached"`
	}
	return json.Unmarshal(body, &a) == nil && a.Cached
}

// simVerdict is what judgeSim found in the calls.
type simVerdict struct {
	answers, errs, cache effect
	notes                []string
	summary              string // the calls in one line, for the report
}

// judgeSim judges the sim calls of a scenario whose fault lasted from
// began to ended, against want (the reference answer per trade):
//
//   - sim answers: every 200 equal to the reference as JSON values, its
//     cached flag aside (lost: a wrong answer);
//   - sim errors: every call without a 200 is a 4xx or 5xx whose body is
//     {"error": "…"} with a message, within simBound, during the fault
//     (until simGrace after its end); a call with no answer after the
//     first answer (the member gone or hung), a slow call or an error
//     outside the fault is lost. Calls before the member's first answer
//     (its server not up yet) are not counted;
//   - sim cache: the four things the fault must not break, each lost when
//     not seen: a cached answer before the fault, a clean error during it,
//     after it a cached answer of a trade answered before it (the cache
//     used again) and a trade first answered after it then answered from
//     the cache (the cache written again).
func judgeSim(calls []simCall, want map[string][]byte, began, ended time.Time) simVerdict {
	v := simVerdict{answers: effect{kind: "sim answers"}, errs: effect{kind: "sim errors (clean)"},
		cache: effect{kind: "sim cache before/during/after", want: 4}}
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].at.Before(calls[j].at) })
	first := map[string]time.Time{} // first 200 per trade
	var cachedBefore, cleanDuring, reusedAfter, rewrittenAfter bool
	up := false
	var hits, inFault int
	var longestOK, longestErr time.Duration
	for _, c := range calls {
		if c.status == 0 && !up {
			continue // the member's server not listening yet
		}
		up = true
		during := !c.at.Before(began) && !c.at.After(ended.Add(simGrace))
		if !c.at.Before(began) && !c.at.After(ended) {
			inFault++
		}
		if c.status == http.StatusOK && c.err == nil {
			v.answers.want++
			ok, err := sameAnswer(c.body, want[c.trade])
			if ok {
				v.answers.got++
			} else {
				v.answers.lost++
				v.notes = append(v.notes, fmt.Sprintf("sim of %s at %s: answer differs from the reference (%v): %.300s",
					c.trade, c.at.UTC().Format("15:04:05.000"), err, c.body))
			}
			if c.took > simBound {
				v.notes = append(v.notes, fmt.Sprintf("sim of %s took %s (bound %s)", c.trade, c.took, simBound))
				v.answers.lost++
			}
			cached := answerCached(c.body)
			longestOK = max(longestOK, c.took)
			if cached {
				hits++
			}
			f, seen := first[c.trade]
			if !seen {
				first[c.trade] = c.at
			}
			switch {
			case cached && c.at.Before(began):
				cachedBefore = true
			case cached && c.at.After(ended) && seen && f.Before(began):
				reusedAfter = true
			case cached && c.at.After(ended) && seen && f.After(ended):
				rewrittenAfter = true
			}
			continue
		}
		v.errs.want++
		longestErr = max(longestErr, c.took)
		var e struct {
			Error string `json:"error"`
		}
		clean := c.err == nil && c.status >= 400 && c.status < 600 && json.Unmarshal(c.body, &e) == nil && e.Error != "" && c.took <= simBound
		switch {
		case !clean:
			v.errs.lost++
			v.notes = append(v.notes, fmt.Sprintf("sim of %s at %s: status %d after %s (%v): %.200s", c.trade,
				c.at.UTC().Format("15:04:05.000"), c.status, c.took.Round(time.Millisecond), c.err, c.body))
		case !during:
			v.errs.lost++
			v.notes = append(v.notes, fmt.Sprintf("sim of %s at %s, outside the fault: status %d: %s", c.trade,
				c.at.UTC().Format("15:04:05.000"), c.status, e.Error))
		default:
			v.errs.got++
			cleanDuring = cleanDuring || !c.at.After(ended)
		}
	}
	for _, seen := range []bool{cachedBefore, cleanDuring, reusedAfter, rewrittenAfter} {
		if seen {
			v.cache.got++
		}
	}
	v.cache.lost = v.cache.want - v.cache.got
	v.summary = fmt.Sprintf("sim: %d answers (%d from the cache; the longest %s), %d errors (the longest %s), over %d trades; %d calls began during the fault (%s)",
		v.answers.want, hits, longestOK.Round(time.Millisecond), v.errs.want, longestErr.Round(time.Millisecond), len(first),
		inFault, ended.Sub(began).Round(100*time.Millisecond))
	if v.cache.lost > 0 {
		v.notes = append(v.notes, fmt.Sprintf("sim: cached answer before the fault %t, clean error during it %t, after it a trade answered before it from the cache %t, a trade first answered after it then from the cache %t",
			cachedBefore, cleanDuring, reusedAfter, rewrittenAfter))
	}
	return v
}

// sameAnswer compares a sim answer with the reference as JSON values, the
// cached flag aside.
func sameAnswer(got, want []byte) (bool, error) {
	if want == nil {
		return false, errors.New("no reference answer for this trade")
	}
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		return false, err
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return false, err
	}
	delete(g, "cached")
	delete(w, "cached")
	return reflect.DeepEqual(g, w), nil
}
