package pgsink_test

import (
	"testing"

	"github.com/sluicehq/sluice/sinks/pgsink"
)

// writePath is one of the two ways a sink sends a transaction's rows. The
// behaviour tests run through both: what lands, what is rejected and what
// is counted must not depend on it.
type writePath struct {
	name string
	opt  pgsink.Option
}

// copyPath and insertPath name the write paths.
const (
	copyPath   = "copy"   // COPY into the table or a staging table
	insertPath = "insert" // one INSERT … VALUES statement
)

func writePaths() []writePath {
	return []writePath{
		{copyPath, pgsink.WithSmallBatch(0)},
		{insertPath, pgsink.WithSmallBatch(1 << 20)}, // up to the bind-parameter limit
	}
}

// eachPath runs f as a parallel subtest per write path.
func eachPath(t *testing.T, f func(t *testing.T, p writePath)) {
	t.Helper()
	for _, p := range writePaths() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f(t, p)
		})
	}
}
