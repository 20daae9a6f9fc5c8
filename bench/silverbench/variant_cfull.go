package main

// Variant p (c′ in the report): the database's full ingest ceiling. The
// same final rows as c, but the COPY is timed too: what is timed is COPY
// of the final rows into temporary staging tables (as the sink stages a
// batch) followed by the two INSERT … SELECT … ON CONFLICT statements, on
// one connection. It is the least PostgreSQL work any client must pay to
// end with the same tables; c leaves the COPY out, so a/c is not a target a
// pipeline can meet (its records must reach the server somehow).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/pipelines/silver"
)

// resultP is the outcome of variant p.
type resultP struct {
	copyTA, copySA time.Duration // COPY into the staging tables
	upsert         *resultC      // the two INSERT … SELECT … ON CONFLICT
}

func (r *resultP) total() time.Duration { return r.copyTA + r.copySA + r.upsert.total() }

// runVariantP times the COPY of p's final rows into temporary staging
// tables and the two upserts from them.
func runVariantP(ctx context.Context, conn *pgx.Conn, p *prepared) (*resultP, error) {
	ta, sa := silver.TATable(), silver.SATable()
	for _, s := range []string{
		"CREATE TEMPORARY TABLE stage_ta (LIKE ta_silver INCLUDING DEFAULTS)",
		"CREATE TEMPORARY TABLE stage_sa (LIKE sa_silver INCLUDING DEFAULTS)",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("full ceiling: %w", err)
		}
	}
	res := &resultP{}
	start := time.Now()
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"stage_ta"}, ta.Columns, pgx.CopyFromSlice(len(p.finalTA), func(i int) ([]any, error) {
		return ta.Values(p.finalTA[i]), nil
	})); err != nil {
		return nil, fmt.Errorf("full ceiling: copy stage_ta: %w", err)
	}
	res.copyTA = time.Since(start)
	start = time.Now()
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"stage_sa"}, sa.Columns, pgx.CopyFromSlice(len(p.finalSA), func(i int) ([]any, error) {
		return sa.Values(p.finalSA[i]), nil
	})); err != nil {
		return nil, fmt.Errorf("full ceiling: copy stage_sa: %w", err)
	}
	res.copySA = time.Since(start)
	up, err := runVariantC(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("full ceiling: %w", err)
	}
	res.upsert = up
	return res, nil
}
