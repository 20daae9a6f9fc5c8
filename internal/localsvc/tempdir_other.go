//go:build !linux

package localsvc

// lockTempDir returns a no-op unlock: directories left behind are only recognised on
// Linux, where a dead parent's servers are known to be dead too.
func lockTempDir(string) (func(), error) { return func() {}, nil }

// removeStaleTempDirs does nothing outside Linux; see lockTempDir.
func removeStaleTempDirs(string, string) {}
