package ticks

import (
	"context"
	"errors"
	"fmt"
)

// Tick is one trade print, like Interactive Brokers' historical "TRADES"
// tick: a time in Unix milliseconds, a price and a size.
type Tick struct {
	TimeMs int64   `parquet:"time_ms" json:"time_ms"`
	Price  float64 `parquet:"price" json:"price"`
	Size   int64   `parquet:"size" json:"size"`
}

// Session is one symbol's trading session on one date.
type Session struct {
	// Start and End bound the session, Unix ms, both inclusive.
	Start, End int64
	// CriticalRanges are the regular trading hours as [start, end] pairs of
	// Unix ms (IB's liquid hours).
	CriticalRanges [][2]int64
}

// Source is the upstream tick provider (IB TWS/Gateway in production; the
// Synthetic source in tests and the demo). Implementations must be safe for
// concurrent use.
type Source interface {
	// TradingHours returns the session of symbol on date (YYYY-MM-DD).
	TradingHours(ctx context.Context, symbol, date string) (Session, error)
	// HistoricalTicks returns at most max ticks of symbol with startMs ≤
	// time ≤ endMs, oldest first, like IB's reqHistoricalTicks. Fewer than
	// max ticks means the range is exhausted. Errors should be *SourceError.
	HistoricalTicks(ctx context.Context, symbol string, startMs, endMs int64, max int) ([]Tick, error)
}

// Error types recorded as a job's last_error_type.
const (
	ErrTypeGatewayTimeout  = "IB_504"
	ErrTypePacing          = "PACING_VIOLATION"
	ErrTypeNoContract      = "NO_SECURITY_DEFINITION"
	ErrTypeStorage         = "STORAGE"
	ErrTypeUnknown         = "UNKNOWN"
	errTypeInternalTimeout = "TIMEOUT"
)

// SourceError is a failed source call. Transient errors (504s, pacing
// violations) are retried with backoff; permanent ones fail the job.
type SourceError struct {
	Type      string
	Transient bool
	Err       error
}

func (e *SourceError) Error() string { return fmt.Sprintf("%s: %v", e.Type, e.Err) }
func (e *SourceError) Unwrap() error { return e.Err }

// GatewayTimeout is the transient error of an HTTP 504 from the gateway.
func GatewayTimeout() error {
	return &SourceError{Type: ErrTypeGatewayTimeout, Transient: true, Err: errors.New("historical data query timed out (504)")}
}

// PacingViolation is IB's transient error 162 "pacing violation".
func PacingViolation() error {
	return &SourceError{Type: ErrTypePacing, Transient: true, Err: errors.New("historical market data service error: pacing violation (162)")}
}

// errorType returns the last_error_type of err and whether it is transient.
func errorType(err error) (string, bool) {
	var se *SourceError
	if errors.As(err, &se) {
		return se.Type, se.Transient
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errTypeInternalTimeout, true
	}
	return ErrTypeUnknown, true
}
