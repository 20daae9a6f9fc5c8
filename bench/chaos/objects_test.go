package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sinks/objstore"
)

type digestBody struct {
	User  string `json:"user"`
	Count int    `json:"count"`
}

// checkObjects counts a missing object and one with other content as lost
// and an object the input does not imply as duplicated; with every object
// as wanted it finds nothing.
func TestCheckObjects(t *testing.T) {
	ctx := context.Background()
	want := map[string]objectCheck{}
	bodies := map[string]digestBody{}
	for _, u := range []string{"a", "b", "c", "d"} {
		key := "digests/" + u + "/2025-01-06-2025-01-12.json"
		bodies[key] = digestBody{User: u, Count: len(u) + 2}
		want[key] = sameJSON(bodies[key])
	}
	put := func(t *testing.T, st objstore.Store, key string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, key, b, "application/json"); err != nil {
			t.Fatal(err)
		}
	}
	newStore := func(t *testing.T) objstore.Store {
		st, err := objstore.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("as wanted", func(t *testing.T) {
		st := newStore(t)
		for k, v := range bodies {
			put(t, st, k, v)
		}
		put(t, st, "other/x.json", digestBody{}) // outside the prefix
		var r result
		e, err := checkObjects(ctx, st, "digests/", "digest objects", want, &r)
		if err != nil {
			t.Fatal(err)
		}
		if !e.ok() || e.got != 4 || e.want != 4 || len(r.notes) != 0 {
			t.Fatalf("effect %+v, notes %v; want 4 of 4, nothing lost or duplicated", e, r.notes)
		}
	})

	t.Run("doctored", func(t *testing.T) {
		st := newStore(t)
		for k, v := range bodies {
			switch {
			case strings.Contains(k, "/b/"): // missing
			case strings.Contains(k, "/c/"): // other content
				v.Count++
				put(t, st, k, v)
			default:
				put(t, st, k, v)
			}
		}
		put(t, st, "digests/a/2025-01-13-2025-01-19.json", bodies["digests/a/2025-01-06-2025-01-12.json"]) // not implied
		var r result
		e, err := checkObjects(ctx, st, "digests/", "digest objects", want, &r)
		if err != nil {
			t.Fatal(err)
		}
		if e.ok() || e.got != 4 || e.want != 4 || e.lost != 2 || e.dup != 1 {
			t.Fatalf("effect %+v; want got 4 of 4, 2 lost (missing, other content), 1 duplicated", e)
		}
		notes := strings.Join(r.notes, "\n")
		for _, s := range []string{"digests/b/2025-01-06-2025-01-12.json is missing", "digests/c/2025-01-06-2025-01-12.json: content differs", "2025-01-13-2025-01-19.json is not one the input implies"} {
			if !strings.Contains(notes, s) {
				t.Errorf("notes lack %q:\n%s", s, notes)
			}
		}
	})
}
