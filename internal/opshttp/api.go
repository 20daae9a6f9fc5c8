package opshttp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// maxAPIBody bounds the request body an API handler reads.
const maxAPIBody = 64 << 10

// WriteJSON answers with status code and v as JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// DecodeBody reads a JSON request body of at most 64 KiB into dst,
// refusing unknown fields. On failure it answers 400 with
// {"error": …} (shape, e.g. "{symbol, date}", says what the body must be)
// and returns false.
func DecodeBody(w http.ResponseWriter, r *http.Request, dst any, shape string) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAPIBody))
	if err != nil {
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "read body: " + err.Error()})
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON " + shape + ": " + err.Error()})
		return false
	}
	return true
}

// WriteAccepted answers a command request: 202 with res when err is nil,
// else {"error": …} with 400 when invalid (the caller's input was refused)
// or 503 (the command could not be sent).
func WriteAccepted(w http.ResponseWriter, res any, err error, invalid bool) {
	switch {
	case err != nil && invalid:
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	case err != nil:
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	default:
		WriteJSON(w, http.StatusAccepted, res)
	}
}
