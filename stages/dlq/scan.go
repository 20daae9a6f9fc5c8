package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// idleTimeout ends a scan or a one-shot archive when no record arrives for
// this long although the captured end was not reached. That happens only when
// the tail of a partition is an open transaction (invisible under
// read_committed) or was removed by retention meanwhile.
const idleTimeout = 10 * time.Second

// fetchMaxWait bounds how long one fetch waits for data, so that idleTimeout
// measures the absence of data rather than fetch long-polling.
const fetchMaxWait = 500 * time.Millisecond

// errStop ends a scan early without error.
var errStop = errors.New("stop scan")

// bounds returns the start and end offsets of every partition of topic,
// captured now, and fails when the topic does not exist.
func bounds(ctx context.Context, adm *kadm.Client, topic string) (starts, ends map[int32]int64, err error) {
	ls, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	le, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
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

// scan reads topic from its start offsets up to the end offsets captured when
// it is called, with a direct (non-group) consumer under read_committed, and
// calls fn for every data record in partition order (partitions interleave).
// It returns when every partition reached its captured end, when fn returns
// errStop (nil is returned), when fn fails, or when ctx is done.
func scan(ctx context.Context, opts []kgo.Opt, topic string, fn func(*kgo.Record) error) error {
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer admCl.Close()
	starts, ends, err := bounds(ctx, kadm.NewClient(admCl), topic)
	if err != nil {
		return err
	}
	from := map[int32]kgo.Offset{}
	for p, end := range ends {
		if starts[p] < end {
			from[p] = kgo.NewOffset().At(starts[p])
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
	return consumeUntil(ctx, cl, ends, from, func(fs kgo.Fetches) error {
		for r := range fs.RecordsAll() {
			if r.Attrs.IsControl() || r.Offset >= ends[r.Partition] {
				continue
			}
			if err := fn(r); err != nil {
				if errors.Is(err, errStop) {
					return errStop
				}
				return err
			}
		}
		return nil
	})
}

// consumeUntil polls cl and hands each polled batch (with records) to handle until every
// partition in pending has delivered the offset before its end in ends, until
// nothing arrives for idleTimeout, or until handle returns errStop (both end
// without error). The records handed over include control records. After
// every poll it allows a rebalance that BlockRebalanceOnPoll held back.
func consumeUntil[V any](ctx context.Context, cl *kgo.Client, ends map[int32]int64, pending map[int32]V, handle func(kgo.Fetches) error) error {
	defer cl.AllowRebalance()
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
			cl.AllowRebalance()
			continue
		}
		err := handle(fs)
		cl.AllowRebalance() // a no-op unless cl is a group member blocking rebalances on poll
		if err != nil {
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
