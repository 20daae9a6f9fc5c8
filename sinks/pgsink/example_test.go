package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
)

// closePrice is one row of
//
//	closes(symbol text, day date, close float8, first_seen timestamptz,
//	       updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (symbol, day))
type closePrice struct {
	Symbol    string
	Day       time.Time
	Close     float64
	FirstSeen time.Time
}

// A sink for a table whose close takes the newest value and whose
// first_seen keeps the earliest. Merge does in memory what the Update
// clause does in SQL, for several items of one key in one batch.
func Example() {
	table := pgsink.Table[closePrice]{
		Name:    "closes",
		Columns: []string{"symbol", "day", "close", "first_seen"},
		Key:     []string{"symbol", "day"},
		Update: []pgsink.Set{
			{Column: "close", Expr: "EXCLUDED.close"},
			{Column: "first_seen", Expr: "LEAST(t.first_seen, EXCLUDED.first_seen)"},
		},
		Touch: []string{"updated_at"},
		KeyOf: func(r closePrice) string { return r.Symbol + "|" + r.Day.Format(time.DateOnly) },
		Merge: func(old, next closePrice) closePrice {
			if old.FirstSeen.Before(next.FirstSeen) {
				next.FirstSeen = old.FirstSeen
			}
			return next
		},
		Values: func(r closePrice) []any { return []any{r.Symbol, r.Day, r.Close, r.FirstSeen} },
	}
	// The pool connects lazily: nothing is dialled until the first Write.
	pool, err := pgxpool.New(context.Background(), "postgres://sluice@127.0.0.1:5432/sluice?sslmode=disable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	sink, err := pgsink.New(pool, table, pgsink.WithRegisterer(prometheus.NewRegistry(), "example"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sink.UpsertSQL())

	// A pipeline then calls sink.Write(ctx, batch) per batch and handles
	// the three outcomes:
	handle := func(err error) string {
		var rej *stages.Rejections
		switch {
		case err == nil:
			return "all rows durable"
		case errors.As(err, &rej):
			return fmt.Sprintf("%d item(s) to dead-letter, the rest durable", len(rej.Items))
		default:
			return fmt.Sprintf("retry the batch (transient: %v)", pgsink.IsTransient(err))
		}
	}
	fmt.Println(handle(&stages.Rejections{Items: []stages.Rejection{{Index: 3, Rule: "pg.22003"}}}))
	// Output:
	// INSERT INTO "closes" AS t ("symbol", "day", "close", "first_seen")
	// SELECT "symbol", "day", "close", "first_seen" FROM "_pgsink_staging"
	// ON CONFLICT ("symbol", "day") DO UPDATE SET
	//   "close" = EXCLUDED.close,
	//   "first_seen" = LEAST(t.first_seen, EXCLUDED.first_seen),
	//   "updated_at" = now()
	// WHERE (t."close", t."first_seen") IS DISTINCT FROM (EXCLUDED.close, LEAST(t.first_seen, EXCLUDED.first_seen))
	// 1 item(s) to dead-letter, the rest durable
}
