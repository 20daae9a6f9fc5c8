package trades

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/stages/run"
)

// Import statuses.
const (
	StatusRunning   = "RUNNING"
	StatusCompleted = "COMPLETED"
	StatusFailed    = "FAILED"
)

// ImportState is the state of one import, the value of trades.import.state
// (key: import_id, written to the partition of its user, the partition of
// the commands that drive it). It is JSON:
//
//	{"import_id","user_id","kind":"import"|"push","broker","since",
//	 "options"?,"run_id","status":"RUNNING"|"COMPLETED"|"FAILED",
//	 "page","cursor"?,"chain_offset","fetched","stored","rejected",
//	 "reset_ms"?,"not_before"?,"wait_since"?,"reason"?,"rule"?,"error"?,
//	 "started_at","updated_at","completed_at"?}
//
// Page is the last page done (0 before the first); Cursor is the broker's
// cursor of the next page. ChainOffset is the offset, in the user's
// partition of trades.import, of the record that last moved the state (an
// import, push or page); when that record is delivered again its successor
// is sent again. Fetched, Stored and Rejected count the run's trades over
// its pages. ResetMS is the broker's last rate-limit reset (the wait of a
// 429 without Retry-After); NotBefore is the not_before of the next page
// (a rate limit's reset); WaitSince is when the current page met its
// first 429 (the bound of its waits). Reason, Rule and Error say why a
// FAILED run failed (dlq.reason, dlq.rule, the error). Times are RFC 3339.
type ImportState struct {
	ImportID    string            `json:"import_id"`
	UserID      string            `json:"user_id"`
	Kind        string            `json:"kind"`
	Broker      string            `json:"broker"`
	Since       string            `json:"since"`
	Options     *SyntheticOptions `json:"options,omitempty"`
	RunID       string            `json:"run_id"`
	Status      string            `json:"status"`
	Page        int               `json:"page"`
	Cursor      string            `json:"cursor,omitempty"`
	ChainOffset int64             `json:"chain_offset"`
	Fetched     int               `json:"fetched"`
	Stored      int               `json:"stored"`
	Rejected    int               `json:"rejected"`
	ResetMS     int64             `json:"reset_ms,omitempty"`
	NotBefore   *time.Time        `json:"not_before,omitempty"`
	WaitSince   *time.Time        `json:"wait_since,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	Rule        string            `json:"rule,omitempty"`
	Error       string            `json:"error,omitempty"`
	StartedAt   time.Time         `json:"started_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	CompletedAt *time.Time        `json:"completed_at,omitempty"`
}

// newStateStore declares the import-state store on topic (the runtime's
// state store "imports": restored on assignment, written after each
// batch's outputs).
func newStateStore(topic string) (*run.Store[ImportState], error) {
	return run.NewStore(run.StoreConfig[ImportState]{
		Name: "imports", Topic: topic,
		Encode: func(st ImportState) ([]byte, error) { return json.Marshal(st) },
		Decode: func(b []byte) (ImportState, error) {
			var st ImportState
			err := json.Unmarshal(b, &st)
			return st, err
		},
	})
}

// ReadImports reads the import-state topic from its start to its current
// end and returns every import's state by import id, as the service's
// store restores it (last record of a key; records of a fenced-off owner
// refused).
func ReadImports(ctx context.Context, kopts []kgo.Opt, topic string) (map[string]ImportState, error) {
	st, err := newStateStore(topic)
	if err != nil {
		return nil, err
	}
	byPart, err := st.Read(ctx, kopts, nil)
	if err != nil {
		return nil, fmt.Errorf("read import states from %s: %w", topic, err)
	}
	out := map[string]ImportState{}
	for _, m := range byPart {
		for k, v := range m {
			out[k] = v
		}
	}
	return out, nil
}
