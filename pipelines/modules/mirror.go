package modules

import (
	"time"

	"github.com/sluicehq/sluice/sinks/pgsink"
)

// MirrorTable is the pgsink description of ticker_data_modules as the
// modules-mirror service writes it from modules.state: one row per key,
// changed only by a state with a greater (epoch, version) than the row's
// (a late record of a revoked owner, or a redelivered older one, changes
// nothing, so the mirror never regresses); the lock columns hold the lease
// while the state is refreshing and are NULL otherwise. States of one key
// in a batch are merged keeping the greatest token. The table must be the
// mirror's alone (the fence compares with what the mirror wrote).
func MirrorTable() pgsink.Table[State] {
	cols := []string{"ticker", "module_id", "status", "data_date", "fetched_at", "expires_at", "input_hash",
		"refresh_lock_until", "refresh_lock_owner", "last_error", "error_count", "state_epoch", "state_version", "updated_at"}
	var update []pgsink.Set
	for _, c := range cols[2:] {
		update = append(update, pgsink.Set{Column: c, Expr: "EXCLUDED." + c})
	}
	return pgsink.Table[State]{
		Name:    "ticker_data_modules",
		Columns: cols,
		Key:     []string{"ticker", "module_id"},
		Update:  update,
		Where: `NOT EXISTS (SELECT 1 FROM ticker_data_modules f
	WHERE f.ticker = s.ticker AND f.module_id = s.module_id
	AND (f.state_epoch, f.state_version) >= (s.state_epoch, s.state_version))`,
		KeyOf: State.Key,
		Merge: func(old, next State) State {
			if old.Supersedes(next) {
				return old
			}
			return next
		},
		Values: mirrorRow,
	}
}

// mirrorRow returns the column values of s in MirrorTable's order.
func mirrorRow(s State) []any {
	var lockUntil *time.Time
	var lockOwner *string
	if s.Status == StatusRefreshing && s.Lease != nil {
		until := s.Lease.Until
		lockUntil, lockOwner = &until, &s.Lease.Owner
	}
	var dataDate *time.Time
	if d, err := time.Parse(time.DateOnly, s.DataDate); err == nil {
		dataDate = &d
	}
	return []any{NormalizeTicker(s.Ticker), s.Module, string(s.Status), dataDate, s.FetchedAt, s.ExpiresAt,
		nullable(s.InputHash), lockUntil, lockOwner, nullable(s.LastError), s.ErrorCount, int64(s.Epoch), s.Version, s.UpdatedAt}
}
