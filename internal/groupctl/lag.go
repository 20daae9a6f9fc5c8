package groupctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
// group. With no groups it reports every group the cluster knows. Groups of
// both protocols are reported: classic ones and, on Kafka 4, KIP-848
// consumer-protocol ones (which the classic describe does not see). A group
// that cannot be described is reported with Err set; Lag itself fails only
// when the cluster cannot be asked at all.
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
	if err := addConsumerProtocolGroups(ctx, adm, lags, len(groups) == 0); err != nil {
		return Report{}, fmt.Errorf("lag: %w", err)
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

// addConsumerProtocolGroups replaces, in lags, the groups the classic
// describe did not find (GROUP_ID_NOT_FOUND: on Kafka 4 that is also its
// answer for a KIP-848 consumer-protocol group) or found without members
// (kfake's answer for such a group) with their lag computed from
// ConsumerGroupDescribe when that describes them; with all set it also
// adds every consumer-protocol group the cluster lists. Brokers without the
// new protocol reject these requests: lags is then left as it is. It fails
// only on an authorization error or a failure to list the start or end
// offsets of a described group's topics; a failure to fetch its committed
// offsets is reported in the group's FetchErr.
func addConsumerProtocolGroups(ctx context.Context, adm *kadm.Client, lags kadm.DescribedGroupLags, all bool) error {
	var names []string
	for g, l := range lags {
		if errors.Is(l.DescribeErr, kerr.GroupIDNotFound) || (l.DescribeErr == nil && len(l.Members) == 0) {
			names = append(names, g)
		}
	}
	if all {
		if listed, err := adm.ListGroupsByType(ctx, []string{"consumer"}); err == nil {
			for _, g := range listed.Groups() {
				if _, ok := lags[g]; !ok {
					names = append(names, g)
				}
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	described, err := adm.DescribeConsumerGroups(ctx, names...)
	if _, auth := errors.AsType[*kadm.AuthError](err); auth {
		return err
	}
	for _, d := range described {
		if d.Err != nil {
			continue // not a consumer-protocol group either: keep the classic answer
		}
		l, err := consumerGroupLag(ctx, adm, d)
		if err != nil {
			return err
		}
		lags[d.Group] = l
	}
	return nil
}

// consumerGroupLag computes the lag of a described consumer-protocol group
// as kadm does for classic groups: every partition assigned to a member or
// committed to, lag from the commit (or from the log start without one).
func consumerGroupLag(ctx context.Context, adm *kadm.Client, d kadm.DescribedConsumerGroup) (kadm.DescribedGroupLag, error) {
	l := kadm.DescribedGroupLag{Group: d.Group, Coordinator: d.Coordinator, State: d.State, ProtocolType: "consumer", Protocol: d.AssignorName}
	commits, err := adm.FetchOffsets(ctx, d.Group)
	if err != nil {
		if _, auth := errors.AsType[*kadm.AuthError](err); auth {
			return l, err
		}
		l.FetchErr = err
		return l, nil
	}
	// Assigned partitions without a commit count from the log start: give
	// them an empty commit so that kadm's calculation includes them.
	owner := map[string]map[int32]int{}
	l.Members = make([]kadm.DescribedGroupMember, len(d.Members))
	for i, m := range d.Members {
		l.Members[i] = kadm.DescribedGroupMember{MemberID: m.MemberID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost}
		for t, ps := range m.Assignment {
			if t == "" {
				continue // a broker that names assigned topics by ID only (kfake)
			}
			if owner[t] == nil {
				owner[t] = map[int32]int{}
			}
			for p := range ps {
				owner[t][p] = i
				if _, ok := commits.Lookup(t, p); !ok {
					commits.Add(kadm.OffsetResponse{Offset: kadm.Offset{Topic: t, Partition: p, At: -1, LeaderEpoch: -1}})
				}
			}
		}
	}
	var topics []string
	for t := range commits {
		topics = append(topics, t)
	}
	var starts, ends kadm.ListedOffsets
	if len(topics) > 0 {
		if starts, err = adm.ListStartOffsets(ctx, topics...); err != nil {
			return l, fmt.Errorf("group %q: list start offsets: %w", d.Group, err)
		}
		if ends, err = adm.ListEndOffsets(ctx, topics...); err != nil {
			return l, fmt.Errorf("group %q: list end offsets: %w", d.Group, err)
		}
		// A topic listed with only partition -1 does not exist (deleted
		// under the group's commits): say so on each of its partitions.
		for _, listed := range []kadm.ListedOffsets{starts, ends} {
			for t, ps := range listed {
				if e, ok := ps[-1]; ok && len(ps) == 1 {
					delete(ps, -1)
					for p := range commits[t] {
						ps[p] = kadm.ListedOffset{Topic: t, Partition: p, Err: cmpErr(e.Err, kerr.UnknownTopicOrPartition)}
					}
				}
			}
		}
	}
	l.Lag = kadm.CalculateGroupLagWithStartOffsets(kadm.DescribedGroup{Group: d.Group}, commits, starts, ends)
	for t, ps := range owner {
		for p, i := range ps {
			if m, ok := l.Lag[t][p]; ok {
				m.Member = &l.Members[i]
				l.Lag[t][p] = m
			}
		}
	}
	return l, nil
}

// cmpErr returns err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
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
