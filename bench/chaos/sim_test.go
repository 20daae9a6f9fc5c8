package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// simFixture is a run of sim calls that meets every check: trade a
// answered and cached before the fault, clean 503s during it, a answered
// from the cache after it, b first answered after it and then from the
// cache.
func simFixture(t *testing.T) (calls []simCall, want map[string][]byte, began, ended time.Time) {
	t.Helper()
	answer := func(trade, delta string, cached bool) []byte {
		b, err := json.Marshal(map[string]any{"user_id": "u", "trade_id": trade, "delta": delta, "cached": cached,
			"curves": []map[string]string{{"ts": "2025-01-06T10:00:00Z", "hold": delta, "actual": "0.00000000"}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	want = map[string][]byte{"a": answer("a", "1.50000000", false), "b": answer("b", "-2.00000000", false)}
	t0 := time.Date(2026, 11, 26, 13, 0, 0, 0, time.UTC)
	began, ended = t0.Add(10*time.Second), t0.Add(20*time.Second)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ok := func(s float64, trade, delta string, cached bool) simCall {
		return simCall{at: at(s), took: 20 * time.Millisecond, trade: trade, status: http.StatusOK, body: answer(trade, delta, cached)}
	}
	outage := []byte(`{"error":"sim cache sim:u:a:7:marketdata: dial tcp 127.0.0.1:18379: connect: connection refused"}`)
	calls = []simCall{
		{at: at(0), trade: "a", err: errors.New("connection refused")}, // the server not up yet
		ok(1, "a", "1.50000000", false),
		ok(2, "a", "1.50000000", true),
		{at: at(11), took: 5 * time.Millisecond, trade: "a", status: http.StatusServiceUnavailable, body: outage},
		{at: at(15), took: 5 * time.Millisecond, trade: "a", status: http.StatusServiceUnavailable, body: outage},
		{at: at(21), took: 5 * time.Millisecond, trade: "b", status: http.StatusServiceUnavailable, body: outage}, // within the grace
		ok(27, "a", "1.50000000", true),
		ok(28, "b", "-2.00000000", false),
		ok(29, "b", "-2.00000000", true),
	}
	return calls, want, began, ended
}

func TestJudgeSimMet(t *testing.T) {
	calls, want, began, ended := simFixture(t)
	v := judgeSim(calls, want, began, ended)
	for _, e := range []effect{v.answers, v.errs, v.cache} {
		if !e.ok() {
			t.Errorf("%s: %+v", e.kind, e)
		}
	}
	if v.answers.got != 5 || v.errs.got != 3 || v.cache.got != 4 || len(v.notes) != 0 {
		t.Fatalf("answers %+v, errors %+v, cache %+v, notes %v; want 5 answers, 3 clean errors, the cache's 4 checks", v.answers, v.errs, v.cache, v.notes)
	}
}

// Each doctored run fails the effect that its defect concerns.
func TestJudgeSimDoctored(t *testing.T) {
	cases := []struct {
		name   string
		doctor func(calls []simCall) []simCall
		kind   string // the effect that must fail
		note   string
	}{
		{"a wrong answer from the cache", func(c []simCall) []simCall {
			c[6].body = []byte(strings.Replace(string(c[6].body), "1.5", "1.6", 2))
			return c
		}, "sim answers", "answer differs"},
		{"a wrong first answer", func(c []simCall) []simCall {
			c[7].body = []byte(strings.Replace(string(c[7].body), `"trade_id":"b"`, `"trade_id":"a"`, 1))
			return c
		}, "sim answers", "answer differs"},
		{"an error without a message", func(c []simCall) []simCall {
			c[3].body = []byte("Service Unavailable")
			return c
		}, "sim errors (clean)", "status 503"},
		{"a hang", func(c []simCall) []simCall {
			c[3].status, c[3].body, c[3].took, c[3].err = 0, nil, simBound, errors.New("Client.Timeout exceeded")
			return c
		}, "sim errors (clean)", "Client.Timeout"},
		{"a 200 slower than the bound", func(c []simCall) []simCall {
			c[2].took = simBound + time.Second
			return c
		}, "sim answers", "bound"},
		{"the member gone after its first answer", func(c []simCall) []simCall {
			c[5].status, c[5].body, c[5].err = 0, nil, errors.New("connection refused")
			return c
		}, "sim errors (clean)", "connection refused"},
		{"an error outside the fault", func(c []simCall) []simCall {
			return append(c, simCall{at: c[8].at.Add(10 * time.Second), took: time.Millisecond, trade: "b",
				status: http.StatusServiceUnavailable, body: []byte(`{"error":"boom"}`)})
		}, "sim errors (clean)", "outside the fault"},
		{"the cache not written again after the fault", func(c []simCall) []simCall {
			return c[:8]
		}, "sim cache before/during/after", "a trade first answered after it then from the cache false"},
		{"no call during the fault", func(c []simCall) []simCall {
			return append(c[:3:3], c[6:]...)
		}, "sim cache before/during/after", "clean error during it false"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, want, began, ended := simFixture(t)
			v := judgeSim(c.doctor(calls), want, began, ended)
			var failed []string
			for _, e := range []effect{v.answers, v.errs, v.cache} {
				if !e.ok() {
					failed = append(failed, e.kind)
				}
			}
			if len(failed) != 1 || failed[0] != c.kind {
				t.Fatalf("failed effects %v, want only %q (answers %+v, errors %+v, cache %+v)", failed, c.kind, v.answers, v.errs, v.cache)
			}
			if notes := strings.Join(v.notes, "\n"); !strings.Contains(notes, c.note) {
				t.Errorf("notes lack %q:\n%s", c.note, notes)
			}
		})
	}
}
