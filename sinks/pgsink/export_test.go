package pgsink

// SetUpsertOnly makes s send every row through the staging table, so that
// the benchmarks (package pgsink_test) can compare it with the default.
func SetUpsertOnly[T any](s *Sink[T], on bool) { s.upsertOnly = on }
