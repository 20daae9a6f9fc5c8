package modules

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// The refresh reads the catalog once per CatalogRefresh; a failed re-read
// keeps the catalog it had; without one the request waits.
func TestRefresherCatalogCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reads := 0
	var fail error
	r := &refresher{log: slog.New(slog.NewTextHandler(io.Discard, nil)), cfg: Config{
		CatalogRefresh: time.Hour,
		Catalog: func(context.Context) (Catalog, error) {
			reads++
			if fail != nil {
				return nil, fail
			}
			return testCatalog(), nil
		},
	}}
	fail = errors.New("database down")
	if _, err := r.catalog(ctx); stages.Classify(err).Kind != stages.KindWait {
		t.Fatalf("no catalog yet: %v, want a wait", err)
	}
	fail = nil
	for range 3 {
		if cat, err := r.catalog(ctx); err != nil || len(cat) != len(testCatalog()) {
			t.Fatalf("catalog = %v, %v", cat, err)
		}
	}
	if reads != 2 {
		t.Errorf("%d reads, want 2 (the failed one, then one within the hour)", reads)
	}
	r.catAt = r.catAt.Add(-2 * time.Hour) // the catalog is now older than CatalogRefresh
	fail = errors.New("database down")
	if cat, err := r.catalog(ctx); err != nil || len(cat) != len(testCatalog()) {
		t.Errorf("failed re-read: %v, %v, want the previous catalog", cat, err)
	}
	if reads != 3 {
		t.Errorf("%d reads, want 3", reads)
	}
}
