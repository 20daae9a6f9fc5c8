package trades

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recheckMargin widens the search of readyPublished before the earliest
// Publishing mark, for a broker clock (LogAppendTime) behind the member's.
const recheckMargin = time.Minute

// readyPublished returns which of the event ids in want are on topic in
// records timestamped at or after since − recheckMargin: it reads every
// partition of topic from the first such record to its end offset listed
// when it starts. kopts are connection options.
func readyPublished(ctx context.Context, kopts []kgo.Opt, topic string, since time.Time, want map[string]bool) (map[string]bool, error) {
	cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.FetchMaxWait(250*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("recheck digest.ready: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListOffsetsAfterMilli(ctx, since.Add(-recheckMargin).UnixMilli(), topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("recheck digest.ready: offsets after %s: %w", since, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("recheck digest.ready: end offsets: %w", err)
	}
	until := map[int32]int64{}
	consume := map[int32]kgo.Offset{}
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(topic, e.Partition)
		if ok && s.Offset >= 0 && s.Offset < e.Offset {
			until[e.Partition] = e.Offset
			consume[e.Partition] = kgo.NewOffset().At(s.Offset)
		}
	})
	found := map[string]bool{}
	if len(until) == 0 {
		return found, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: consume})
	for len(until) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("recheck digest.ready: read %s/%d: %w", t, p, err)
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := until[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			var e struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(r.Value, &e) == nil && want[e.EventID] {
				found[e.EventID] = true
			}
			if r.Offset >= end-1 {
				delete(until, r.Partition)
			}
		})
	}
	return found, nil
}
