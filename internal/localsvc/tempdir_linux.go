//go:build linux

package localsvc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// tempLockName is the file in a temporary server directory that the
// process which made the directory keeps locked (flock) until Stop removes
// the directory. The kernel drops the lock when that process dies, however
// it dies (a forced exit, SIGKILL), so an unlocked lock file marks a
// directory left behind.
const tempLockName = ".localsvc.lock"

// lockTempDir creates dir's lock file and holds an exclusive flock on it
// until the returned file is closed. The file is locked under another name
// and then renamed, so that a lock file, once it has its name, is locked:
// removeStaleTempDirs never takes a directory being set up for a stale one.
func lockTempDir(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, tempLockName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: flock: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, tempLockName)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// removeStaleTempDirs removes the directories parent/pattern* whose lock
// file exists and is not locked: the process that made them is gone, and on
// Linux its servers were killed with it (see sysProcAttr), so nothing uses
// them. Directories without a lock file (being set up, or left by a version
// of this package without lock files) and locked ones are left alone. It is
// best effort: errors leave a directory for a later call. The lock file is
// removed last, so a directory only partly removed is still recognised.
func removeStaleTempDirs(parent, pattern string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, pattern+"*"))
	for _, dir := range dirs {
		removeIfStale(dir)
	}
}

func removeIfStale(dir string) {
	lock := filepath.Join(dir, tempLockName)
	f, err := os.Open(lock)
	if err != nil {
		return // not ours, not a directory, or being set up
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return // its process is alive (EWOULDBLOCK), or flock is unusable here
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == tempLockName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return
		}
	}
	if err := os.Remove(lock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	_ = os.Remove(dir)
}
