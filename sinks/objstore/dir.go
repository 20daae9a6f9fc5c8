package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Dir is a Store on a local directory. Object key "a/b/c" is the file
// root/a/b/c. Put writes a temporary "<name>.<random>.tmp" file in the
// target's directory (<name> cut to 200 bytes), fsyncs it, renames it over
// the target and fsyncs the directory and every directory up to the root,
// so a crash leaves either the old object or the new one, and an object
// whose Put returned nil survives a crash. List ignores ".tmp" files. Dir
// is safe for concurrent use; concurrent Puts of one key leave one of the
// written values.
//
// Unlike S3, a key cannot name an object and also be a prefix of another
// object's key followed by "/" ("a" and "a/b"): the second Put fails. A key
// that is only such a prefix (a directory) is missing for Get, Stat and
// Delete, as on S3.
type Dir struct {
	root string
	// syncDir fsyncs a directory; a field so that tests can observe it.
	syncDir func(dir string) error
}

var _ Store = (*Dir)(nil)

// NewDir returns a directory store rooted at root, creating it if missing.
func NewDir(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("objstore: empty directory")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("objstore: directory %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("objstore: create directory %s: %w", abs, err)
	}
	if err := syncDir(filepath.Dir(abs)); err != nil {
		return nil, fmt.Errorf("objstore: fsync directory %s: %w", filepath.Dir(abs), err)
	}
	return &Dir{root: abs, syncDir: syncDir}, nil
}

// Root returns the absolute directory of the store.
func (d *Dir) Root() string { return d.root }

func (d *Dir) path(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put stores data under key atomically (see Dir). contentType is ignored.
func (d *Dir) Put(ctx context.Context, key string, data []byte, _ string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	// The temporary name adds up to 15 bytes: cut the base so that any
	// segment of MaxSegmentLen bytes still fits the file-name limit.
	base := filepath.Base(p)
	if len(base) > 200 {
		base = base[:200]
	}
	f, err := os.CreateTemp(dir, base+".*.tmp")
	if err != nil {
		return fmt.Errorf("objstore: put %s: %w", key, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("objstore: put %s: write: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("objstore: put %s: fsync: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("objstore: put %s: close: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("objstore: put %s: rename: %w", key, err)
	}
	ok = true
	// Persist the new entry and the entries of any directory MkdirAll (or a
	// concurrent Put) created, up to the root.
	for sd := dir; ; sd = filepath.Dir(sd) {
		if err := d.syncDir(sd); err != nil {
			return fmt.Errorf("objstore: put %s: fsync directory: %w", key, err)
		}
		if sd == d.root || len(sd) <= len(d.root) {
			break
		}
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Get returns the object's bytes or an error matching ErrNotFound.
func (d *Dir) Get(ctx context.Context, key string) ([]byte, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, notFound(key, err)
	}
	return b, nil
}

// Stat describes the object or returns an error matching ErrNotFound.
func (d *Dir) Stat(ctx context.Context, key string) (Info, error) {
	p, err := d.path(key)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return Info{}, notFound(key, err)
	}
	if fi.IsDir() {
		return Info{}, fmt.Errorf("objstore: stat %s: %w", key, ErrNotFound)
	}
	return Info{Key: key, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// notFound maps a missing file, a missing or non-directory parent, and a
// directory (a key that is only a prefix of other keys) to ErrNotFound.
func notFound(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || isNotDir(err) || errors.Is(err, syscall.EISDIR) {
		return fmt.Errorf("objstore: %s: %w", key, ErrNotFound)
	}
	return fmt.Errorf("objstore: %s: %w", key, err)
}

func isNotDir(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory")
}

// List returns the objects whose key starts with prefix, sorted by key.
// In-progress ".tmp" files are not listed.
func (d *Dir) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	// Walk the deepest directory that contains every match.
	base := prefix
	if !strings.HasSuffix(base, "/") {
		base = path.Dir(base)
		if base == "." {
			base = ""
		}
	}
	start := filepath.Join(d.root, filepath.FromSlash(base))
	var out []Info
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || strings.HasSuffix(p, ".tmp") {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted meanwhile
			}
			return err
		}
		out = append(out, Info{Key: key, Size: fi.Size(), Modified: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object; deleting a missing key is not an error.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return nil // only a prefix of other keys: no object
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && !isNotDir(err) {
		return fmt.Errorf("objstore: delete %s: %w", key, err)
	}
	if err := d.syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("objstore: delete %s: fsync directory: %w", key, err)
	}
	return nil
}
