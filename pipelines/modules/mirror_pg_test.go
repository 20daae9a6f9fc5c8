package modules

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks/pgsink"
)

type mirrored struct {
	status, hash, lockOwner string
	locked                  bool
	epoch, version          int64
	dataDate                string
}

// The mirror applies modules.state to ticker_data_modules: a row changes
// only for a greater (epoch, version), the lease shows in the lock columns
// while refreshing, and the view derives freshness from what it wrote.
func TestMirrorTable(t *testing.T) {
	t.Parallel()
	ctx, pool := migrated(t)
	sink, err := pgsink.New(pool, MirrorTable())
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]mirrored {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT ticker::text || ':' || module_id, status, coalesce(input_hash, ''),
			coalesce(refresh_lock_owner, ''), refresh_lock_until IS NOT NULL, state_epoch, state_version, coalesce(data_date::text, '')
			FROM ticker_data_modules`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]mirrored{}
		for rows.Next() {
			var k string
			var m mirrored
			if err := rows.Scan(&k, &m.status, &m.hash, &m.lockOwner, &m.locked, &m.epoch, &m.version, &m.dataDate); err != nil {
				t.Fatal(err)
			}
			out[k] = m
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	m := testCatalog()[ModuleOptionsFlow]
	now := time.Now().UTC()
	base := State{Ticker: "NVDA", Module: ModuleOptionsFlow, Status: StatusMissing}
	refreshing := base.Refreshing("member-a", tok(2, 1), now)
	ready := refreshing.Ready(m, "h1", "", nil, tok(2, 2), now)
	si := State{Ticker: "nvda", Module: ModuleShortInterest, Status: StatusMissing}.
		Ready(testCatalog()[ModuleShortInterest], "s1", "2025-01-16", nil, tok(2, 3), now)

	if err := sink.Write(ctx, []State{refreshing, si}); err != nil {
		t.Fatal(err)
	}
	got := read()
	if r := got["NVDA:options_flow"]; r != (mirrored{status: "refreshing", lockOwner: "member-a", locked: true, epoch: 2, version: 1}) {
		t.Errorf("refreshing row = %+v", r)
	}
	if r := got["NVDA:short_interest"]; r != (mirrored{status: "ready", hash: "s1", epoch: 2, version: 3, dataDate: "2025-01-16"}) {
		t.Errorf("short_interest row = %+v", r)
	}

	// Ready clears the lock; a revoked owner's late write (smaller epoch,
	// greater version) and a redelivered older state change nothing.
	zombie := base.Ready(m, "zombie", "", nil, tok(1, 99), now)
	if err := sink.Write(ctx, []State{ready}); err != nil {
		t.Fatal(err)
	}
	if err := sink.Write(ctx, []State{zombie, refreshing}); err != nil {
		t.Fatal(err)
	}
	if r := read()["NVDA:options_flow"]; r != (mirrored{status: "ready", hash: "h1", epoch: 2, version: 2}) {
		t.Errorf("after ready, a zombie and a redelivery: %+v", r)
	}

	// In one batch the greatest token wins, whatever the order; a new
	// owner's (greater epoch) write applies.
	failed := ready.Refreshing("member-b", tok(3, 1), now).Failed(nil, tok(3, 2), now)
	retry := failed.Refreshing("member-b", tok(3, 3), now)
	if err := sink.Write(ctx, []State{retry, failed}); err != nil {
		t.Fatal(err)
	}
	if r := read()["NVDA:options_flow"]; r != (mirrored{status: "refreshing", hash: "h1", lockOwner: "member-b", locked: true, epoch: 3, version: 3}) {
		t.Errorf("after a new owner's batch: %+v", r)
	}
	var freshness string
	if err := pool.QueryRow(ctx, `SELECT freshness_status FROM ticker_modules_status WHERE ticker = 'nvda' AND module_id = 'short_interest'`).
		Scan(&freshness); err != nil || freshness != "fresh" {
		t.Errorf("view of the mirrored short_interest: %s (%v)", freshness, err)
	}
}
