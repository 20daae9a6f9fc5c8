package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// latestOpts returns the client options implementing StartOffset "latest"
// beyond offsetOpts (none for "earliest"), and the function the runner
// calls with the client once kgo.NewClient (or NewGroupTransactSession)
// returned it: a kgo.AdjustFetchOffsetsFn hook running pinLatest when
// partitions are assigned. The hook runs on kgo's group goroutine once the
// member joined, that is after the client exists; it waits for setClient
// (or for its context, cancelled when the group session begins revoking).
func latestOpts(cfg Config, log *slog.Logger) (opts []kgo.Opt, setClient func(*kgo.Client)) {
	if cfg.StartOffset != "latest" {
		return nil, func(*kgo.Client) {}
	}
	var cl *kgo.Client
	created := make(chan struct{})
	hook := kgo.AdjustFetchOffsetsFn(func(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
		select {
		case <-created:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return pinLatest(ctx, cl, cfg.Name, log, offsets)
	})
	return []kgo.Opt{hook}, func(c *kgo.Client) {
		cl = c
		close(created)
	}
}

// pinLatest resolves StartOffset "latest" once per partition and makes it
// the group's: it replaces the start offset of the partitions in offsets
// that the group has no commit for (kgo passes them as the "latest" start
// offset, unresolved) with the concrete offset it stands for, the
// partition's end as the client reads it (its last stable offset with
// read_committed, as the transactional runner reads, its high watermark
// otherwise), and commits that offset for the group before it returns, so
// before any record of those partitions is fetched.
//
// The commit is what keeps a new group from losing records: without it, a
// member that stops (crash, shutdown, a sink down so that nothing was ever
// committed) or loses the partition in a rebalance before its first commit
// leaves the group without a commit, and the next owner resolves "latest"
// again, at the end of a log that has grown meanwhile, skipping every record
// in between. With it, the next owner resumes where this one started.
// Returning the concrete offset also makes kgo count it as the partition's
// committed position, so a transaction aborted before the group's first
// commit of its own rewinds to it rather than to offset 0 (kgo's placeholder
// for "no commit", that is the log start).
//
// The commit is the member's own group commit (kgo.Client.CommitOffsetsSync),
// fenced by its generation (member epoch with KIP-848): kgo fetched the
// group's commits for these partitions in this generation, in which only
// this member is assigned them, so no member can commit them in between,
// and a member that is no longer in that generation (a zombie, or this one
// after the group moved on) has its commit refused (ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH) without effect. A previous owner's
// transaction still pending is waited for: kgo fetches the commits with
// RequireStable. Partitions with a commit are left alone: their offsets are
// neither changed nor committed. The commit goes outside any transaction,
// which Kafka accepts for a group whose members otherwise commit through
// transactions (kgo.GroupTransactSession): it carries no record, and the
// transactions' own offset commits then move it forward.
//
// An error (listing the end of a partition to pin, or the commit refused;
// the listing errors of the topics' other partitions do not count) fails
// the hook: kgo ends the group session (the runner sees the partitions lost
// and a fetch error) and rejoins, so a partition is never consumed from a
// start the group has not recorded. Called by kgo (kgo.AdjustFetchOffsetsFn, see
// latestOpts) when partitions are assigned, with StartOffset "latest" only.
func pinLatest(ctx context.Context, cl *kgo.Client, name string, log *slog.Logger, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	var topics []string
	for topic, ps := range offsets {
		for _, o := range ps {
			if o.EpochOffset().Offset < 0 {
				topics = append(topics, topic)
				break
			}
		}
	}
	if len(topics) == 0 {
		return offsets, nil
	}
	adm := kadm.NewClient(cl)
	list, what := adm.ListEndOffsets, "high watermarks"
	if readsCommitted(cl) {
		list, what = adm.ListCommittedOffsets, "last stable offsets"
	}
	// The listing covers every partition of topics; only the ends of the
	// partitions to pin matter, so the error of another one (its leader
	// down, its broker unreachable: a shard error with the others listed)
	// does not fail the hook.
	ends, listErr := list(ctx, topics...)
	pinned := map[string]map[int32]kgo.EpochOffset{}
	for _, topic := range topics {
		for p, o := range offsets[topic] {
			if o.EpochOffset().Offset >= 0 {
				continue
			}
			end, ok := ends.Lookup(topic, p)
			err := end.Err
			if !ok {
				err = unlisted(ends, listErr, topic)
			}
			if err != nil {
				return nil, fmt.Errorf("pipeline %s: list the %s of %s/%d to start at (StartOffset latest): %w", name, what, topic, p, err)
			}
			if pinned[topic] == nil {
				pinned[topic] = map[int32]kgo.EpochOffset{}
			}
			pinned[topic][p] = kgo.EpochOffset{Epoch: -1, Offset: end.Offset}
		}
	}
	if err := commitSync(ctx, cl, pinned); err != nil {
		return nil, fmt.Errorf("pipeline %s: commit the start offsets of the partitions of %v without a commit (StartOffset latest): %w", name, topics, err)
	}
	for topic, ps := range pinned {
		for p, eo := range ps {
			offsets[topic][p] = kgo.NewOffset().At(eo.Offset)
			log.Info("partition without a commit starts at its end, committed for the group (StartOffset latest)", "topic", topic, "partition", p, "offset", eo.Offset)
		}
	}
	return offsets, nil
}

// unlisted returns why a partition of topic is missing from ends, the
// result of a listing that returned listErr: the topic's own error, else
// listErr, else an error saying it was not listed.
func unlisted(ends kadm.ListedOffsets, listErr error, topic string) error {
	if te, ok := ends.Lookup(topic, -1); ok && te.Err != nil {
		return te.Err
	}
	if listErr != nil {
		return listErr
	}
	return errors.New("not listed")
}

// readsCommitted reports whether cl fetches with read_committed isolation.
// kgo reports the level as its int8 code (0 is read_uncommitted); any other
// answer counts as read_committed, whose end (the last stable offset) is
// never past the high watermark, so a start resolved with it skips nothing.
func readsCommitted(cl *kgo.Client) bool {
	level, ok := cl.OptValue(kgo.FetchIsolationLevel).(int8)
	return !ok || level != 0
}

// commitSync commits offsets as cl's group member (generation-fenced) and
// waits for the answer, returning the request's error or the first
// partition's.
func commitSync(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) error {
	var rerr error
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
					rerr = fmt.Errorf("partition %d: %w", p.Partition, err)
				}
			}
		}
	})
	return rerr
}
