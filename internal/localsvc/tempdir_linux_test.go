//go:build linux

package localsvc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// removeStaleTempDirs removes a directory of the pattern whose lock file is
// not locked (its process died), with everything in it, and leaves alone a
// locked one, one without a lock file, and one of another pattern.
func TestRemoveStaleTempDirs(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	mk := func(name string) string {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(filepath.Join(dir, "data", "base"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", "base", "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// lockedBy makes dir's lock file and returns it locked.
	lockedBy := func(dir string) (unlock func()) {
		t.Helper()
		unlock, err := lockTempDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return unlock
	}
	stale, live, bare, other := mk("localsvc-x-1"), mk("localsvc-x-2"), mk("localsvc-x-3"), mk("otherprefix-4")
	lockedBy(stale)() // as the kernel does when the process dies
	held := lockedBy(live)
	defer held()
	lockedBy(other)()

	removeStaleTempDirs(parent, "localsvc-x-")
	assertGone(t, stale)
	for _, d := range []string{live, bare, other} {
		if _, err := os.Stat(filepath.Join(d, "data", "base", "f")); err != nil {
			t.Fatalf("%s was touched: %v", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(live, tempLockName)); err != nil {
		t.Fatalf("lock file of the live directory: %v", err)
	}

	held()
	removeStaleTempDirs(parent, "localsvc-x-")
	assertGone(t, live)
	if !dirExists(bare) || !dirExists(other) {
		t.Fatal("a directory without a lock file, or of another pattern, was removed")
	}
}

// helperEnv marks the test binary started by
// TestStartPostgresRemovesDirOfDeadProcess as its helper.
const helperEnv = "LOCALSVC_TEST_START_AND_EXIT"

// TestHelperStartPostgresAndExit is not a test: run with helperEnv set, it
// starts a PostgreSQL server in a temporary directory and exits without
// Stop, as sluice demo does on a second Ctrl-C.
func TestHelperStartPostgresAndExit(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process only")
	}
	pg, err := StartPostgres(testContext(t), PostgresOptions{})
	if errors.Is(err, ErrNotFound) {
		os.Exit(4)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(5)
	}
	fmt.Printf("port=%d\n", pg.Port)
	os.Exit(3)
}

// A process that started a server in a temporary directory and exited
// without Stop (sluice demo killed by a second signal) left the directory,
// a whole PostgreSQL cluster, behind for ever. The next StartPostgres with
// the same temporary parent now removes it.
func TestStartPostgresRemovesDirOfDeadProcess(t *testing.T) {
	tmp := reachableDir(t)
	t.Setenv("TMPDIR", tmp)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartPostgresAndExit$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 4:
		t.Skip("PostgreSQL not installed")
	case !errors.As(err, &exit) || exit.ExitCode() != 3:
		t.Fatalf("helper: %v (want exit status 3)\n%s%s", err, out, stderrOf(err))
	}
	var port int
	if _, err := fmt.Sscanf(string(out), "port=%d", &port); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "localsvc-pg-*"))
	if len(left) != 1 || !fileExists(filepath.Join(left[0], "data", "PG_VERSION")) {
		t.Fatalf("the helper left %v, want one cluster directory", left)
	}
	// Its server dies with it (Pdeathsig); wait until it no longer answers.
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.DialTimeout("tcp", localAddr(port), time.Second)
		if err != nil {
			break
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the helper's server on port %d still answers", port)
		}
		time.Sleep(100 * time.Millisecond)
	}

	pg := startPostgres(t, PostgresOptions{})
	if _, err := os.Stat(left[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead process's %s is still there after the next StartPostgres (stat: %v)", left[0], err)
	}
	now, _ := filepath.Glob(filepath.Join(tmp, "localsvc-pg-*"))
	if len(now) != 1 {
		t.Fatalf("directories after the second start: %v, want only the new server's", now)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, now[0])
}

func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// A lock stays held until unlock even when nothing references it any more:
// a server handle dropped without Stop must not let a later Start take the
// running server's directory for a stale one.
func TestTempDirLockSurvivesGC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := lockTempDir(dir); err != nil { // dropped at once
		t.Fatal(err)
	}
	for range 3 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond) // let finalizers run
	}
	f, err := os.Open(filepath.Join(dir, tempLockName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock of a directory whose lock was only dropped: %v, want EWOULDBLOCK (the lock was released)", err)
	}
	removeStaleTempDirs(filepath.Dir(dir), filepath.Base(dir))
	if _, err := os.Stat(filepath.Join(dir, tempLockName)); err != nil {
		t.Fatalf("the locked directory was removed: %v", err)
	}
}

// A symbolic link matching the pattern, to a directory with an unlocked
// lock file, is neither followed nor removed.
func TestRemoveStaleTempDirsSkipsSymlinks(t *testing.T) {
	t.Parallel()
	parent, target := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(target, tempLockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(parent, "localsvc-y-1")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	removeStaleTempDirs(parent, "localsvc-y-")
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Fatalf("a file behind the symbolic link was removed: %v", err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("the symbolic link was removed: %v", err)
	}
}
