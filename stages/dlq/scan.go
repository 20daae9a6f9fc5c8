package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// idleTimeout ends a scan or a one-shot archive when no record arrives for
// this long although the captured end was not reached. The end is the last
// stable offset (see bounds), so an open transaction does not cause that; a
// broker that stopped answering or retention removing the rest of a
// partition meanwhile does. A scan then fails (see scan); ArchiveOnce ends
// without error (its runtime's Config.StopIdle).
const idleTimeout = 10 * time.Second

// fetchMaxWait bounds how long one fetch waits for data, so that idleTimeout
// measures the absence of data rather than fetch long-polling.
const fetchMaxWait = 500 * time.Millisecond

// errStop ends a scan early without error.
var errStop = errors.New("stop scan")

// errIncomplete is wrapped by the error of a scan that stopped for lack of
// data before every partition reached its captured end.
var errIncomplete = errors.New("scan incomplete")

// bounds returns the start and end offsets of every partition of topic,
// captured now, and fails when the topic does not exist. The end is the
// last stable offset (LSO): the end a read_committed consumer — every
// consumer in this package — can reach. It is the high watermark unless a
// transaction is open, in which case it is the first offset of the oldest
// open transaction (records after it, committed or not, are not readable
// under read_committed until that transaction ends).
func bounds(ctx context.Context, adm *kadm.Client, topic string) (starts, ends map[int32]int64, err error) {
	ls, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	le, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list last stable offsets of %s: %w", topic, err)
	}
	starts, ends = map[int32]int64{}, map[int32]int64{}
	for p, l := range le[topic] {
		if p == -1 || errors.Is(l.Err, kerr.UnknownTopicOrPartition) {
			return nil, nil, fmt.Errorf("topic %q does not exist", topic)
		}
		if l.Err != nil {
			return nil, nil, fmt.Errorf("end offset of %s[%d]: %w", topic, p, l.Err)
		}
		s, ok := ls.Lookup(topic, p)
		if !ok || s.Err != nil {
			return nil, nil, fmt.Errorf("start offset of %s[%d]: %v", topic, p, s.Err)
		}
		starts[p], ends[p] = s.Offset, l.Offset
	}
	if len(ends) == 0 {
		return nil, nil, fmt.Errorf("topic %q does not exist", topic)
	}
	return starts, ends, nil
}

// scan reads topic from its start offsets up to the end offsets (last stable
// offsets, see bounds) captured when it is called, with a direct
// (non-group) consumer under read_committed, and calls fn for every data
// record in partition order (partitions interleave). It returns nil when
// every partition reached its captured end or when fn returns errStop. It
// fails when fn fails, when ctx is done, and when no record arrives for
// idleTimeout while some partitions are short of their end: that error
// wraps errIncomplete and names those partitions with their position and
// end. fn was called for every record read before it.
func scan(ctx context.Context, opts []kgo.Opt, topic string, fn func(*kgo.Record) error) error {
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, ends, err := bounds(ctx, adm, topic)
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	pos := map[int32]int64{} // next offset to read, per partition in from
	for p, end := range ends {
		if starts[p] < end {
			from[p] = kgo.NewOffset().At(starts[p])
			pos[p] = starts[p]
		}
	}
	if len(from) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the offsets of commit markers count towards the end
		kgo.FetchMaxWait(fetchMaxWait),
	)...)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer cl.Close()
	stopped := false
	err = consumeUntil(ctx, cl, ends, from, func(fs kgo.Fetches) error {
		for r := range fs.RecordsAll() {
			if r.Offset >= pos[r.Partition] {
				pos[r.Partition] = r.Offset + 1
			}
			if r.Attrs.IsControl() || r.Offset >= ends[r.Partition] {
				continue
			}
			if err := fn(r); err != nil {
				if errors.Is(err, errStop) {
					stopped = true
					return errStop
				}
				return err
			}
		}
		return nil
	})
	if err != nil || stopped {
		return err
	}
	return shortOfEnd(ctx, adm, topic, pos, ends)
}

// shortOfEnd is the error of a scan that ended idle with partitions short of
// their end (positions in pos), or nil when every partition reached its end.
// A partition whose start offset has meanwhile reached its end (retention
// removed what was left to read) counts as complete.
func shortOfEnd(ctx context.Context, adm *kadm.Client, topic string, pos, ends map[int32]int64) error {
	var short []int32
	for p, at := range pos {
		if at < ends[p] {
			short = append(short, p)
		}
	}
	if len(short) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, idleTimeout)
	ls, lerr := adm.ListStartOffsets(lctx, topic)
	cancel()
	if lerr == nil {
		short = slices.DeleteFunc(short, func(p int32) bool {
			s, ok := ls.Lookup(topic, p)
			return ok && s.Err == nil && s.Offset >= ends[p]
		})
		if len(short) == 0 {
			return nil
		}
	}
	slices.Sort(short)
	parts := make([]string, len(short))
	for i, p := range short {
		parts[i] = fmt.Sprintf("%s[%d] at offset %d of %d", topic, p, pos[p], ends[p])
	}
	return fmt.Errorf("%w: nothing arrived for %v while partitions were short of their end (the last stable offset at the start): %s; "+
		"the records read before were processed. Likely a slow or unavailable broker (failover), or retention removing records "+
		"meanwhile (an open transaction does not cause this)",
		errIncomplete, idleTimeout, strings.Join(parts, ", "))
}

// consumeUntil polls cl and hands each polled batch (with records) to handle
// until every partition in pending has delivered the offset before its end
// in ends, until nothing arrives for idleTimeout, or until handle returns
// errStop (both end without error: a caller that must tell an idle end from
// a complete one tracks the positions itself, as scan does). The records
// handed over include control records.
func consumeUntil(ctx context.Context, cl *kgo.Client, ends map[int32]int64, pending map[int32]kgo.Offset, handle func(kgo.Fetches) error) error {
	left := len(pending)
	done := map[int32]bool{}
	for left > 0 {
		pctx, cancel := context.WithTimeout(ctx, idleTimeout)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.Empty() && pctx.Err() != nil {
			return nil // idle: see idleTimeout
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := handle(fs); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
		for r := range fs.RecordsAll() {
			if _, ok := pending[r.Partition]; ok && !done[r.Partition] && r.Offset+1 >= ends[r.Partition] {
				done[r.Partition] = true
				left--
			}
		}
	}
	return nil
}
