package modules

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// wantDeadLetter fails unless err is a dead letter with reason and rule.
func wantDeadLetter(t *testing.T, err error, reason stages.Reason, rule string) {
	t.Helper()
	c := stages.Classify(err)
	if c == nil || c.Kind != stages.KindDeadLetter || c.Reason != reason || c.Rule != rule {
		t.Fatalf("err = %v (%+v), want dead letter %s/%s", err, c, reason, rule)
	}
}

func dur(d time.Duration) *time.Duration { return &d }

func at(t time.Time) *time.Time { return &t }

// testCatalog holds the catalog rows of the migration, and a disabled
// module.
func testCatalog() Catalog {
	return Catalog{
		ModuleOptionsFlow: {ID: ModuleOptionsFlow, FreshnessThreshold: dur(15 * time.Minute), DataTTL: time.Hour,
			AnalysisTTL: 30 * time.Minute, MaxStale: dur(4 * time.Hour), Enabled: true},
		ModuleShortInterest: {ID: ModuleShortInterest, FreshnessThreshold: dur(time.Hour), DataTTL: 24 * time.Hour,
			AnalysisTTL: 24 * time.Hour, MaxStale: dur(72 * time.Hour), Enabled: true},
		ModuleDarkPool: {ID: ModuleDarkPool, FreshnessThreshold: dur(time.Hour), DataTTL: 24 * time.Hour,
			AnalysisTTL: 24 * time.Hour, Enabled: true},
		ModulePriceAction: {ID: ModulePriceAction, FreshnessThreshold: dur(15 * time.Minute), DataTTL: time.Hour,
			AnalysisTTL: 30 * time.Minute, Enabled: true},
		"retired": {ID: "retired", DataTTL: time.Hour, AnalysisTTL: time.Hour, Enabled: false},
	}
}
