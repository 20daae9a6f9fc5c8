package trades

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// SimRoute is the pattern of the sim's API route.
const SimRoute = "GET /api/v1/trades/{user_id}/trades/{trade_id}/sim"

// Routes returns the sim's HTTP API, GET
// /api/v1/trades/{user_id}/trades/{trade_id}/sim?horizon_days=7 (default
// 7): 200 with the SimResult as JSON, 400 for a horizon_days that is not an
// integer from 1 to 90, 404 for an unknown trade (or user), 503 when a
// store, the vendor or Redis failed. Errors are {"error": "..."}.
func (s *Sim) Routes() map[string]http.Handler {
	return map[string]http.Handler{SimRoute: http.HandlerFunc(s.handleSim)}
}

func (s *Sim) handleSim(w http.ResponseWriter, r *http.Request) {
	horizon := DefaultSimHorizonDays
	if v := r.URL.Query().Get("horizon_days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			n = 0 // out of range: Run answers ErrSimHorizon and counts it
		}
		horizon = n
	}
	res, err := s.Run(r.Context(), r.PathValue("user_id"), r.PathValue("trade_id"), horizon)
	switch {
	case errors.Is(err, ErrSimHorizon):
		writeSimJSON(w, http.StatusBadRequest, map[string]string{"error": ErrSimHorizon.Error()})
	case errors.Is(err, ErrTradeNotFound):
		writeSimJSON(w, http.StatusNotFound, map[string]string{"error": "unknown trade"})
	case err != nil:
		writeSimJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	default:
		writeSimJSON(w, http.StatusOK, res)
	}
}

func writeSimJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
