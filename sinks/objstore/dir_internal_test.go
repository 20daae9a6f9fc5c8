package objstore

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// A Put that creates directories fsyncs each new directory's parent too:
// otherwise a crash after Put returned could lose the directory entry, and
// with it an object the caller was told is durable.
func TestDirPutSyncsNewDirectories(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d, err := NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var synced []string
	d.syncDir = func(dir string) error {
		mu.Lock()
		synced = append(synced, dir)
		mu.Unlock()
		return syncDir(dir)
	}
	if err := d.Put(context.Background(), "a/b/obj", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
		if !slices.Contains(synced, dir) {
			t.Errorf("directory %s not fsynced; synced %v", dir, synced)
		}
	}
}
