//go:build !linux

package localsvc

import "os"

// lockTempDir returns nil: directories left behind are only recognised on
// Linux, where a dead parent's servers are known to be dead too.
func lockTempDir(string) (*os.File, error) { return nil, nil }

// removeStaleTempDirs does nothing outside Linux; see lockTempDir.
func removeStaleTempDirs(string, string) {}
