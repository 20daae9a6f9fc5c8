package groupctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
)

// PartitionLag is one partition's lag in a group.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Committed is the group's committed offset, -1 when it has none (lag
	// then counts from the log start offset).
	Committed int64
	// End is the partition's end offset (high watermark).
	End int64
	// Lag is End minus the committed offset (or the start offset when
	// nothing is committed); -1 when it could not be computed (see Err).
	Lag int64
	// Member is the client id of the member consuming the partition, empty
	// when the group has no members.
	Member string
	Err    error
}

// TopicLag is the total lag of a group on one topic.
type TopicLag struct {
	Topic string
	Lag   int64
}

// GroupLag is the lag of one group.
type GroupLag struct {
	Group   string
	State   string // Empty, Stable, Dead, ...
	Members int
	// Partitions, sorted by topic then partition.
	Partitions []PartitionLag
	// Topics are the totals per topic, sorted by topic.
	Topics []TopicLag
	// Total is the sum of the partition lags that could be computed.
	Total int64
	// Err is set when the group could not be described or its offsets
	// could not be fetched (for example a group that does not exist).
	Err error
}

// Report is the result of [Lag], one entry per group sorted by name.
type Report struct {
	Groups []GroupLag
}

// Group returns the lag of the named group.
func (r Report) Group(name string) (GroupLag, bool) {
	for _, g := range r.Groups {
		if g.Group == name {
			return g, true
		}
	}
	return GroupLag{}, false
}

// Lag reports the committed offset, end offset and lag of every partition
// the given groups consume or committed to, with totals per topic and per
// group. With no groups it reports every (classic-protocol) group the
// cluster knows. A group that cannot be described is reported with Err set;
// Lag itself fails only when the cluster cannot be asked at all.
func Lag(ctx context.Context, adm *kadm.Client, groups ...string) (Report, error) {
	lags, err := adm.Lag(ctx, groups...)
	var rep Report
	if err != nil {
		// One group can fail the whole request (e.g. kadm cannot resolve a
		// topic deleted under a group's commits): ask group by group so that
		// only that group carries the error.
		if lags, err = lagEach(ctx, adm, groups, &rep); err != nil {
			return Report{}, fmt.Errorf("lag: %w", err)
		}
	}
	for _, l := range lags.Sorted() {
		g := GroupLag{Group: l.Group, State: l.State, Members: len(l.Members), Err: l.Error()}
		if g.Err != nil {
			g.Err = fmt.Errorf("group %q: %w", l.Group, g.Err)
		}
		for _, m := range l.Lag.Sorted() {
			p := PartitionLag{
				Topic:     m.Topic,
				Partition: m.Partition,
				Committed: m.Commit.At,
				End:       m.End.Offset,
				Lag:       m.Lag,
				Err:       m.Err,
			}
			if m.Member != nil {
				p.Member = m.Member.ClientID
			}
			if p.Err != nil {
				p.Lag = -1
			}
			g.Partitions = append(g.Partitions, p)
		}
		for _, t := range l.Lag.TotalByTopic().Sorted() {
			g.Topics = append(g.Topics, TopicLag{Topic: t.Topic, Lag: t.Lag})
		}
		g.Total = l.Lag.Total()
		rep.Groups = append(rep.Groups, g)
	}
	sort.Slice(rep.Groups, func(i, j int) bool { return rep.Groups[i].Group < rep.Groups[j].Group })
	return rep, nil
}

// lagEach asks the lag of groups (all listed groups when none are named)
// one group at a time. Groups whose request fails go to rep with Err set;
// it fails only when the groups cannot be listed.
func lagEach(ctx context.Context, adm *kadm.Client, groups []string, rep *Report) (kadm.DescribedGroupLags, error) {
	if len(groups) == 0 {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return nil, err
		}
		groups = listed.Groups()
	}
	out := kadm.DescribedGroupLags{}
	for _, g := range groups {
		l, err := adm.Lag(ctx, g)
		if err != nil {
			rep.Groups = append(rep.Groups, GroupLag{Group: g, Err: fmt.Errorf("group %q: %w", g, err)})
			continue
		}
		maps.Copy(out, l)
	}
	return out, nil
}

// Err returns the errors of the report's groups and partitions joined, nil
// when every group was described and every partition's lag computed.
func (r Report) Err() error {
	var errs []error
	for _, g := range r.Groups {
		if g.Err != nil {
			errs = append(errs, g.Err)
		}
		for _, p := range g.Partitions {
			if p.Err != nil {
				errs = append(errs, fmt.Errorf("group %q: %s/%d: %w", g.Group, p.Topic, p.Partition, p.Err))
			}
		}
	}
	return errors.Join(errs...)
}
