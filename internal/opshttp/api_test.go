package opshttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// DecodeBody refuses unknown fields and malformed bodies with a 400 naming
// the expected shape; WriteAccepted maps a command's outcome to 202, 400
// or 503.
func TestAPIHelpers(t *testing.T) {
	t.Parallel()
	type req struct {
		A string `json:"a"`
	}
	for body, ok := range map[string]bool{`{"a":"x"}`: true, `{"b":1}`: false, `{`: false} {
		w := httptest.NewRecorder()
		var got req
		if DecodeBody(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), &got, "{a}") != ok {
			t.Errorf("body %s: ok %v", body, !ok)
		}
		if ok && got.A != "x" {
			t.Errorf("body %s decoded %+v", body, got)
		}
		if !ok && (w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "body must be JSON {a}")) {
			t.Errorf("body %s: %d %s", body, w.Code, w.Body)
		}
	}
	for _, c := range []struct {
		err     error
		invalid bool
		code    int
	}{{nil, false, 202}, {errors.New("bad input"), true, 400}, {errors.New("kafka down"), false, 503}} {
		w := httptest.NewRecorder()
		WriteAccepted(w, map[string]int{"n": 1}, c.err, c.invalid)
		if w.Code != c.code || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%v: %d", c.err, w.Code)
		}
		if c.err != nil && !strings.Contains(w.Body.String(), c.err.Error()) {
			t.Errorf("%v: body %s", c.err, w.Body)
		}
	}
}
