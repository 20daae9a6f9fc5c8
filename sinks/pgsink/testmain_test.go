package pgsink_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
)

// TestMain gives the package's tests one local PostgreSQL for the whole
// test binary when DATABASE_URL is unset (testkit.MainWithPostgres).
func TestMain(m *testing.M) {
	os.Exit(testkit.MainWithPostgres(m))
}
