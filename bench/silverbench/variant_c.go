package main

// Variant c: the database's ceiling. The final rows (the corpus merged per
// key in memory, exactly what the tables must contain at the end) are
// COPYed into UNLOGGED staging tables beforehand; what is timed is only
// the two statements INSERT INTO target SELECT … FROM staging ON CONFLICT
// (key) DO UPDATE SET <the sink's merge SQL>, one per table, run one after
// the other on one connection.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// stagingUpsert renders the sink's upsert statement reading from staging
// instead of the sink's temporary table.
func stagingUpsert[T any](t pgsink.Table[T], staging string) string {
	cols := strings.Join(t.Columns, ", ")
	key := strings.Join(t.Key, ", ")
	var sets, targets, exprs []string
	for _, s := range t.Update {
		sets = append(sets, s.Column+" = "+s.Expr)
		targets = append(targets, "t."+s.Column)
		exprs = append(exprs, s.Expr)
	}
	for _, c := range t.Touch {
		sets = append(sets, c+" = now()")
	}
	return fmt.Sprintf("INSERT INTO %s AS t (%s) SELECT %s FROM %s ON CONFLICT (%s) DO UPDATE SET %s WHERE (%s) IS DISTINCT FROM (%s)",
		t.Name, cols, cols, staging, key, strings.Join(sets, ", "), strings.Join(targets, ", "), strings.Join(exprs, ", "))
}

// resultC is the outcome of variant c.
type resultC struct {
	ta, sa time.Duration
	rows   int
	load   time.Duration // untimed: CREATE + COPY of the final rows + VACUUM ANALYZE
}

func (r *resultC) total() time.Duration { return r.ta + r.sa }

// loadVariantC creates and fills the unlogged staging tables (not timed).
func loadVariantC(ctx context.Context, conn *pgx.Conn, p *prepared) error {
	ta, sa := silver.TATable(), silver.SATable()
	for _, s := range []string{
		"CREATE UNLOGGED TABLE stage_ta (LIKE ta_silver INCLUDING DEFAULTS)",
		"CREATE UNLOGGED TABLE stage_sa (LIKE sa_silver INCLUDING DEFAULTS)",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return err
		}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"stage_ta"}, ta.Columns, pgx.CopyFromSlice(len(p.finalTA), func(i int) ([]any, error) {
		return ta.Values(p.finalTA[i]), nil
	})); err != nil {
		return fmt.Errorf("load stage_ta: %w", err)
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"stage_sa"}, sa.Columns, pgx.CopyFromSlice(len(p.finalSA), func(i int) ([]any, error) {
		return sa.Values(p.finalSA[i]), nil
	})); err != nil {
		return fmt.Errorf("load stage_sa: %w", err)
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE stage_ta, stage_sa"); err != nil {
		return err
	}
	return nil
}

// runVariantC times the two upserts.
func runVariantC(ctx context.Context, conn *pgx.Conn) (*resultC, error) {
	res := &resultC{}
	for _, step := range []struct {
		sql string
		d   *time.Duration
	}{
		{stagingUpsert(silver.TATable(), "stage_ta"), &res.ta},
		{stagingUpsert(silver.SATable(), "stage_sa"), &res.sa},
	} {
		start := time.Now()
		tag, err := conn.Exec(ctx, step.sql)
		if err != nil {
			return nil, fmt.Errorf("ceiling upsert: %w", err)
		}
		*step.d = time.Since(start)
		res.rows += int(tag.RowsAffected())
	}
	return res, nil
}
