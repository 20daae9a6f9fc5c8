package localsvc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go/build"
	"math"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// findBinary looks name up on PATH, then in dirs in order (each may be a
// glob, whose newest-looking match wins, so /usr/lib/postgresql/*/bin
// prefers the highest version). Symlinks are not resolved: some programs
// (redis-server) choose their behaviour by the name they are run as. The
// error wraps ErrNotFound.
func findBinary(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		matches, _ := filepath.Glob(d)
		// By the numbers in the path, then lexically: 9.6 < 15 < 16, so the
		// last match is the newest numbered version.
		slices.SortFunc(matches, func(a, b string) int {
			return cmp.Or(slices.Compare(numbers(a), numbers(b)), strings.Compare(a, b))
		})
		for j := len(matches) - 1; j >= 0; j-- {
			p := filepath.Join(matches[j], name)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	where := "on PATH"
	if len(dirs) > 0 {
		where += " or in " + strings.Join(dirs, ", ")
	}
	return "", fmt.Errorf("%s %w %s", name, ErrNotFound, where)
}

// numbers returns the decimal numbers in s, in order ("/x/9.6/bin" gives
// 9 and 6); a number too large for uint64 counts as the largest.
func numbers(s string) []uint64 {
	var ns []uint64
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r < '0' || r > '9' }) {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			n = math.MaxUint64
		}
		ns = append(ns, n)
	}
	return ns
}

// goPath returns $(go env GOPATH), falling back to $GOPATH and then the
// default GOPATH when the go command is not available.
func goPath() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "env", "GOPATH").Output(); err == nil {
		if p := strings.TrimSpace(string(out)); p != "" {
			return p
		}
	}
	return cmp.Or(os.Getenv("GOPATH"), build.Default.GOPATH)
}

// osUser is an OS account a server runs as.
type osUser struct {
	name     string
	uid, gid uint32
}

// lookupUser returns the uid and gid of the named OS account.
func lookupUser(name string) (*osUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("no %q OS user: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of %q: %w", name, err)
	}
	return &osUser{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// serverDir returns the directory a server runs in, and whether it is a
// temporary one for Stop to remove. With dir empty it makes a fresh
// directory named pattern under os.TempDir() (under /tmp when user is set
// and $TMPDIR is not searchable by others). With dir set it creates dir if
// missing. When user is set the directory is chowned to user, after checking
// (for a given dir) that user can reach it.
func serverDir(dir, pattern string, user *osUser) (path string, temp bool, err error) {
	if dir == "" {
		if path, err = os.MkdirTemp(tempParent(user), pattern); err != nil {
			return "", false, fmt.Errorf("temp dir: %w", err)
		}
		err := handOver(path, user)
		if err == nil && user != nil {
			err = os.Chmod(path, 0o755) // like a given dir made by MkdirAll
		}
		if err != nil {
			return "", false, errors.Join(err, os.RemoveAll(path))
		}
		return path, true, nil
	}
	if path, err = filepath.Abs(dir); err != nil {
		return "", false, fmt.Errorf("directory %s: %w", dir, err)
	}
	perm := os.FileMode(0o700)
	if user != nil {
		perm = 0o755 // parents created here must be searchable by user
		if parent := filepath.Dir(path); !worldTraversable(parent) {
			return "", false, fmt.Errorf("directory %s: OS user %s cannot reach it (%s or one of its parents is not searchable by others); use a directory under /tmp", path, user.name, parent)
		}
	}
	if err := os.MkdirAll(path, perm); err != nil {
		return "", false, fmt.Errorf("directory: %w", err)
	}
	return path, false, handOver(path, user)
}

// tempParent is where serverDir makes a temporary directory: os.TempDir(),
// or /tmp when user is set and os.TempDir() is not searchable by others.
func tempParent(user *osUser) string {
	parent := os.TempDir()
	if user != nil && !worldTraversable(parent) {
		parent = "/tmp"
	}
	return parent
}

// handOver gives dir to user (nil: leaves it alone).
func handOver(dir string, user *osUser) error {
	if user == nil {
		return nil
	}
	if err := os.Chown(dir, int(user.uid), int(user.gid)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", dir, user.name, err)
	}
	return nil
}

// worldTraversable reports whether every directory from dir up to / that
// exists can be searched by any user (directories that do not exist yet
// will be created searchable).
func worldTraversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil || fi.Mode().Perm()&0o001 == 0:
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}
