package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
)

// contract runs the Store contract against a fresh store from newStore.
func contract(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	t.Run("put-get-overwrite-stat", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		key := "ticks/FPT/2024-05-02/part_1_a.parquet"
		if err := s.Put(ctx, key, []byte("one"), "application/octet-stream"); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, key, []byte("second"), "application/octet-stream"); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, key)
		if err != nil || string(got) != "second" {
			t.Fatalf("Get = %q, %v; want %q", got, err, "second")
		}
		in, err := s.Stat(ctx, key)
		if err != nil || in.Key != key || in.Size != 6 || in.Modified.IsZero() {
			t.Fatalf("Stat = %+v, %v; want key %s size 6 and a time", in, err, key)
		}
		// Empty objects are objects.
		if err := s.Put(ctx, "empty", nil, ""); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Get(ctx, "empty"); err != nil || len(b) != 0 {
			t.Fatalf("Get(empty) = %q, %v", b, err)
		}
	})
	t.Run("missing-is-ErrNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		if _, err := s.Get(ctx, "no/such/key"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get missing: %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, "no/such/key"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Stat missing: %v, want ErrNotFound", err)
		}
		if err := s.Put(ctx, "file", []byte("x"), ""); err != nil {
			t.Fatal(err)
		}
		// A key "below" an object is missing too.
		if _, err := s.Get(ctx, "file/below"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get below an object: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "no/such/key"); err != nil {
			t.Errorf("Delete missing: %v, want nil", err)
		}
	})
	t.Run("list-sorted-by-prefix", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		keys := []string{"a/b/2", "a/b/10", "a/c/1", "a/bz", "b/1", "a/b/1/x"}
		for _, k := range keys {
			if err := s.Put(ctx, k, []byte(k), "text/plain"); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"a/b/", []string{"a/b/1/x", "a/b/10", "a/b/2"}},
			{"a/b", []string{"a/b/1/x", "a/b/10", "a/b/2", "a/bz"}},
			{"a/b/1", []string{"a/b/1/x", "a/b/10"}},
			{"", []string{"a/b/1/x", "a/b/10", "a/b/2", "a/bz", "a/c/1", "b/1"}},
			{"zzz/", nil},
			{"zz", nil},
		} {
			infos, err := s.List(ctx, tc.prefix)
			if err != nil {
				t.Fatalf("List(%q): %v", tc.prefix, err)
			}
			var got []string
			for _, in := range infos {
				got = append(got, in.Key)
				if in.Size != int64(len(in.Key)) {
					t.Errorf("List(%q): %s size %d, want %d", tc.prefix, in.Key, in.Size, len(in.Key))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("List(%q) = %v, want %v", tc.prefix, got, tc.want)
			}
		}
	})
	t.Run("delete", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		for _, k := range []string{"d/1", "d/2"} {
			if err := s.Put(ctx, k, []byte("x"), ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(ctx, "d/1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "d/1"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
		infos, err := s.List(ctx, "d/")
		if err != nil || len(infos) != 1 || infos[0].Key != "d/2" {
			t.Errorf("List after Delete = %+v, %v; want only d/2", infos, err)
		}
	})
	t.Run("invalid-keys-rejected", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		for _, k := range []string{"", "/abs", "a/../b", "..", "../x", "a//b", "./a", "a/./b", "a/", "x.tmp", `a\b`} {
			if err := s.Put(ctx, k, []byte("x"), ""); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Put(%q) = %v, want ErrInvalidKey", k, err)
			}
			if _, err := s.Get(ctx, k); err == nil || errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want a key error", k, err)
			}
			if err := s.Delete(ctx, k); err == nil {
				t.Errorf("Delete(%q) accepted", k)
			}
		}
		if _, err := s.List(ctx, "../"); err == nil {
			t.Error("List(../) accepted")
		}
	})
	t.Run("prefix-of-keys-is-missing", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		if err := s.Put(ctx, "p/q/r", []byte("x"), ""); err != nil {
			t.Fatal(err)
		}
		// "p/q" is only a prefix of another key: no object, like on S3.
		if _, err := s.Get(ctx, "p/q"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(p/q) = %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, "p/q"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Stat(p/q) = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "p/q"); err != nil {
			t.Errorf("Delete(p/q) = %v, want nil (missing key)", err)
		}
		if b, err := s.Get(ctx, "p/q/r"); err != nil || string(b) != "x" {
			t.Errorf("Get(p/q/r) = %q, %v after Delete(p/q)", b, err)
		}
	})
	t.Run("key-limits", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		// The longest segment every store (and MinIO) takes: 255 bytes.
		long := "l/" + strings.Repeat("s", 255)
		if err := s.Put(ctx, long, []byte("x"), ""); err != nil {
			t.Fatalf("Put(255-byte segment): %v", err)
		}
		if b, err := s.Get(ctx, long); err != nil || string(b) != "x" {
			t.Fatalf("Get(255-byte segment) = %q, %v", b, err)
		}
		if infos, err := s.List(ctx, "l/"); err != nil || len(infos) != 1 || infos[0].Key != long {
			t.Fatalf("List(l/) = %+v, %v; want the long key only", infos, err)
		}
		// Keys no store can hold are rejected up front as invalid keys (a
		// permanent error), not sent to be refused by the backend.
		for name, k := range map[string]string{
			"segment-256": "l/" + strings.Repeat("s", 256),
			"key-1025":    strings.Repeat("abcdefg/", 128) + "x",
			"non-utf8":    "l/bad\xff",
		} {
			if err := s.Put(ctx, k, []byte("x"), ""); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Put(%s) = %v, want ErrInvalidKey", name, err)
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Get(%s) = %v, want ErrInvalidKey", name, err)
			}
		}
	})
	t.Run("concurrent-puts", func(t *testing.T) {
		t.Parallel()
		s, ctx := newStore(t), testkit.Context(t)
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Distinct keys and one shared key.
				errs <- s.Put(ctx, fmt.Sprintf("c/%02d", i), bytes.Repeat([]byte{byte(i)}, 1000), "")
				errs <- s.Put(ctx, "c/shared", bytes.Repeat([]byte{byte(i)}, 1000), "")
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		infos, err := s.List(ctx, "c/")
		if err != nil || len(infos) != 21 {
			t.Fatalf("List = %d objects, %v; want 21", len(infos), err)
		}
		b, err := s.Get(ctx, "c/shared")
		if err != nil || len(b) != 1000 || !bytes.Equal(b, bytes.Repeat(b[:1], 1000)) {
			t.Fatalf("shared object torn or missing: len %d, %v", len(b), err)
		}
	})
}

func TestDirContract(t *testing.T) {
	t.Parallel()
	contract(t, func(t *testing.T) objstore.Store {
		d, err := objstore.NewDir(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestS3Contract(t *testing.T) {
	t.Parallel()
	st := testkit.NewObjectStore(t)
	if st.Dir != "" {
		t.Skip("no S3 store")
	}
	t.Logf("using %s", st)
	s3, err := objstore.NewS3(testkit.Context(t), objstore.S3Config{
		Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Bucket: st.Bucket, Secure: st.Secure,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var mu sync.Mutex
	contract(t, func(t *testing.T) objstore.Store {
		mu.Lock()
		defer mu.Unlock()
		n++
		return objstore.WithPrefix(s3, fmt.Sprintf("%ssub%d/", st.Prefix, n))
	})
}

func TestNewS3CreatesBucket(t *testing.T) {
	t.Parallel()
	st := testkit.NewObjectStore(t)
	if st.Kind != "local" {
		t.Skip("needs a private MinIO to create buckets in")
	}
	ctx := testkit.Context(t)
	s3, err := objstore.NewS3(ctx, objstore.S3Config{Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Bucket: "fresh-bucket"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.Put(ctx, "k", []byte("v"), ""); err != nil {
		t.Fatal(err)
	}
	ok, err := st.MinioClient(t).BucketExists(ctx, "fresh-bucket")
	if err != nil || !ok {
		t.Fatalf("bucket fresh-bucket exists = %v, %v", ok, err)
	}
	if _, err := objstore.NewS3(ctx, objstore.S3Config{Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: "wrong", Bucket: "fresh-bucket"}); err == nil {
		t.Error("NewS3 with a wrong secret succeeded")
	}
}

// A crash mid-Put leaves a .tmp file next to the old object: readers still
// see the old object and List ignores the leftover.
func TestDirCrashLeftoverInvisible(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d, err := objstore.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Put(ctx, "x/obj", []byte("old"), ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "x", "obj.123.tmp"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := d.Get(ctx, "x/obj"); err != nil || string(b) != "old" {
		t.Fatalf("Get = %q, %v", b, err)
	}
	infos, err := d.List(ctx, "x/")
	if err != nil || len(infos) != 1 || infos[0].Key != "x/obj" {
		t.Fatalf("List = %+v, %v; want only x/obj", infos, err)
	}
	// A successful Put leaves no temporary file of its own.
	if err := d.Put(ctx, "x/obj", []byte("new"), ""); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "x"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "obj,obj.123.tmp" {
		t.Fatalf("directory holds %v, want obj and the old leftover only", names)
	}
}
