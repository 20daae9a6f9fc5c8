package pgsink_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/sinks/pgsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// pageView is one view of a page: views(page text PRIMARY KEY, n bigint)
// counts them, an effect that is not idempotent.
type pageView struct{ Page string }

// A counter table written exactly once per input record: the sink stores
// each batch's consumer offset with its rows (WithOffsets), and the runner
// claims each assigned partition from it and does not write again what it
// stored (run.WithOffsetStore). Without them a redelivered batch would
// count its views twice.
func ExampleWithOffsets() {
	views := pgsink.Table[pageView]{
		Name:    "views",
		Columns: []string{"page", "n"},
		Key:     []string{"page"},
		Update:  []pgsink.Set{{Column: "n", Expr: "t.n + EXCLUDED.n"}},
		KeyOf:   func(v pageView) string { return v.Page },
		Values:  func(v pageView) []any { return []any{v.Page, 1} },
	}
	// Neither the pool nor the runner connects before Run.
	pool, err := pgxpool.New(context.Background(), "postgres://sluice@127.0.0.1:5432/sluice?sslmode=disable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	sink, err := pgsink.New(pool, views, pgsink.WithOffsets())
	if err != nil {
		fmt.Println(err)
		return
	}
	decode := func(_, v []byte) (string, error) { return string(v), nil }
	stage := func(_ context.Context, m stages.Msg[string]) ([]pageView, error) {
		return []pageView{{Page: m.Value}}, nil
	}
	cfg := run.Config{Name: "views", Topics: []string{"page.views"}, DLQTopic: "page.views.dlq"}
	r, err := run.New(cfg, decode, stage, stages.Sink[pageView](sink), run.WithOffsetStore(sink))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pipeline", r.Name(), "upserts with:")
	fmt.Println(sink.UpsertSQL())
	// Output:
	// pipeline views upserts with:
	// INSERT INTO "views" AS t ("page", "n")
	// SELECT "page", "n" FROM "_pgsink_staging"
	// ON CONFLICT ("page") DO UPDATE SET
	//   "n" = t.n + EXCLUDED.n
	// WHERE (t."n") IS DISTINCT FROM (t.n + EXCLUDED.n)
}
