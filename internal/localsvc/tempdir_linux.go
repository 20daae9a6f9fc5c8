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
// until unlock is called (or the process ends). The file is locked under
// another name and then renamed, so that a lock file, once it has its name,
// is locked: removeStaleTempDirs never takes a directory being set up for a
// stale one. The lock is a raw descriptor, not an *os.File, so that no
// finalizer can release it while the server runs, even when the caller
// drops its handle without Stop.
func lockTempDir(dir string) (unlock func(), err error) {
	tmp := filepath.Join(dir, tempLockName+".new")
	fd, err := syscall.Open(tmp, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, &os.PathError{Op: "open", Path: tmp, Err: err})
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("lock %s: flock: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, tempLockName)); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { _ = syscall.Close(fd) }, nil
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
	// Only a real directory: a symbolic link matching the pattern (made by
	// someone else in a shared temporary directory) is not followed.
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return
	}
	lock := filepath.Join(dir, tempLockName)
	f, err := os.Open(lock)
	if err != nil {
		return // not ours, not a directory, or being set up
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return // its process is alive (EWOULDBLOCK), or flock is unusable here
	}
	// Removing through an os.Root keeps every removal inside dir, even if
	// an entry is swapped for a symbolic link meanwhile.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return
	}
	defer root.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == tempLockName {
			continue
		}
		if err := root.RemoveAll(e.Name()); err != nil {
			return
		}
	}
	if err := root.Remove(tempLockName); err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	_ = os.Remove(dir)
}
