package modules

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Module is one analysis_catalog row: a module's freshness threshold (data
// fetched longer ago is stale; nil: never stale by age), the TTLs of its raw
// data and of its analyses, how old its data may be to be served when
// nothing fresher exists (nil: never) and whether it is enabled.
type Module struct {
	ID                 string
	FreshnessThreshold *time.Duration
	DataTTL            time.Duration
	AnalysisTTL        time.Duration
	MaxStale           *time.Duration
	Enabled            bool
}

// Catalog maps module ids to their catalog entries.
type Catalog map[string]Module

// Querier runs a query; *pgxpool.Pool, *pgx.Conn and pgx.Tx implement it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// LoadCatalog reads analysis_catalog (resolved through the connection's
// search_path), disabled modules included. The hours are converted to
// whole microseconds.
func LoadCatalog(ctx context.Context, q Querier) (Catalog, error) {
	rows, err := q.Query(ctx, `SELECT module_id,
	round(freshness_threshold_hours * 3600000000)::int8,
	round(data_ttl_hours * 3600000000)::int8,
	round(analysis_ttl_hours * 3600000000)::int8,
	round(max_stale_hours * 3600000000)::int8,
	enabled
FROM analysis_catalog`)
	if err != nil {
		return nil, fmt.Errorf("modules: read analysis_catalog: %w", err)
	}
	cat := Catalog{}
	var (
		m                  Module
		fresh, stale       *int64
		dataTTL, analysTTL int64
	)
	_, err = pgx.ForEachRow(rows, []any{&m.ID, &fresh, &dataTTL, &analysTTL, &stale, &m.Enabled}, func() error {
		e := m
		e.DataTTL = time.Duration(dataTTL) * time.Microsecond
		e.AnalysisTTL = time.Duration(analysTTL) * time.Microsecond
		e.FreshnessThreshold = micros(fresh)
		e.MaxStale = micros(stale)
		cat[e.ID] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("modules: read analysis_catalog: %w", err)
	}
	return cat, nil
}

func micros(us *int64) *time.Duration {
	if us == nil {
		return nil
	}
	d := time.Duration(*us) * time.Microsecond
	return &d
}
