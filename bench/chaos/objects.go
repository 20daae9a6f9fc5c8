package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// objectCheck judges one object's body: nil when it holds what the input
// implies.
type objectCheck func(body []byte) error

// checkObjects compares the objects under prefix with want (key → the
// check of its body): got counts the objects listed, lost the wanted keys
// missing or whose body fails its check (each noted, the first few), dup
// the keys listed that are not wanted. Bodies are read by 8 readers at
// once.
func checkObjects(ctx context.Context, store objstore.Store, prefix, kind string, want map[string]objectCheck, r *result) (effect, error) {
	e := effect{kind: kind, want: int64(len(want))}
	infos, err := store.List(ctx, prefix)
	if err != nil {
		return e, fmt.Errorf("list %s: %w", prefix, err)
	}
	var keys []string
	have := map[string]bool{}
	for _, in := range infos {
		e.got++
		have[in.Key] = true
		if _, ok := want[in.Key]; !ok {
			e.dup++
			if e.dup <= 5 {
				r.note("%s: %s is not one the input implies", kind, in.Key)
			}
			continue
		}
		keys = append(keys, in.Key)
	}
	for k := range want {
		if !have[k] {
			e.lost++
			if e.lost <= 5 {
				r.note("%s: %s is missing", kind, k)
			}
		}
	}
	sort.Strings(keys)
	bad := make([]error, len(keys))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				body, err := store.Get(ctx, keys[i])
				if err == nil {
					err = want[keys[i]](body)
				}
				bad[i] = err
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	var wrong int64
	for i, err := range bad {
		if err != nil {
			wrong++
			if wrong <= 5 {
				r.note("%s: %s: %v", kind, keys[i], err)
			}
		}
	}
	e.lost += wrong
	return e, nil
}

// sameJSON returns a check that the body equals want as a JSON value (key
// order and number spelling aside).
func sameJSON(want any) objectCheck {
	return func(body []byte) error {
		b, err := json.Marshal(want)
		if err != nil {
			return err
		}
		var got, w any
		if err := json.Unmarshal(body, &got); err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
		if !reflect.DeepEqual(got, w) {
			return fmt.Errorf("content differs: %.200s, want %.200s", body, b)
		}
		return nil
	}
}
