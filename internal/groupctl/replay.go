// Package groupctl operates on Kafka consumer groups from the outside: it
// moves a group's committed offsets to replay (or skip) records, and reports
// consumer lag. Everything goes through kadm; nothing here joins a group.
//
// The functions are safe for concurrent use as far as the *kadm.Client they
// are given is; they hold no state of their own.
package groupctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TargetKind says where [Replay] moves a group's offsets.
type TargetKind int

const (
	// Earliest moves to the log start offset: every retained record is re-read.
	Earliest TargetKind = iota + 1
	// Latest moves to the end offset: every existing record is skipped.
	Latest
	// Offset moves to Target.Offset, clamped to [start, end] per partition.
	Offset
	// Timestamp moves to the first offset whose record timestamp is at or
	// after Target.Time (the log start for a time before the first retained
	// record); a partition with no such record moves to its end, and its
	// Move says so in Note.
	Timestamp
)

// Target is the destination of a replay.
type Target struct {
	Kind   TargetKind
	Offset int64     // for Offset
	Time   time.Time // for Timestamp
}

// String describes t for messages and plans.
func (t Target) String() string {
	switch t.Kind {
	case Earliest:
		return "earliest"
	case Latest:
		return "latest"
	case Offset:
		return fmt.Sprintf("offset %d", t.Offset)
	case Timestamp:
		return "time " + t.Time.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprintf("unknown target kind %d", int(t.Kind))
	}
}

func (t Target) validate() error {
	switch t.Kind {
	case Earliest, Latest:
	case Offset:
		if t.Offset < 0 {
			return fmt.Errorf("target offset %d is negative", t.Offset)
		}
	case Timestamp:
		if t.Time.IsZero() {
			return errors.New("target time is not set")
		}
	default:
		return fmt.Errorf("unknown target kind %d", int(t.Kind))
	}
	return nil
}

// ReplayRequest says which group, which partitions, and where to.
type ReplayRequest struct {
	Group  string
	Topics []string
	// Partitions optionally restricts a topic to some of its partitions;
	// a topic absent from the map means all of its partitions.
	Partitions map[string][]int32
	To         Target
	// DryRun computes and returns the plan without committing it.
	DryRun bool
}

// Move is the planned change of one partition's committed offset.
type Move struct {
	Topic     string
	Partition int32
	// Current is the committed offset before the replay, -1 when the group
	// has no commit for the partition.
	Current int64
	// New is the offset the group resumes from after the replay.
	New int64
	// Start and End are the partition's log start and end offsets when the
	// plan was made.
	Start, End int64
	// Note says why New is not simply the requested target, empty when it
	// is: a time with no record at or after it in the partition (New is
	// the end: nothing is re-read there), an empty partition, an offset
	// clamped to the end or to the log start.
	Note string
}

// Plan is the result of [Replay]: the moves sorted by topic then partition,
// and whether they were committed.
type Plan struct {
	Group     string
	To        Target
	Moves     []Move
	Committed bool
}

// ActiveMembersError is returned by [Replay] while the group has members:
// offsets committed under a live consumer would be overwritten by its next
// commit, so replaying requires the group to be stopped first.
type ActiveMembersError struct {
	Group   string
	State   string
	Members int
}

func (e *ActiveMembersError) Error() string {
	if e.Members == 0 {
		return fmt.Sprintf("group %q is in state %s; stop its members before replaying", e.Group, e.State)
	}
	return fmt.Sprintf("group %q has %d active members; stop them before replaying", e.Group, e.Members)
}

// Replay moves the committed offsets of req.Group on req.Topics to req.To
// and returns the plan (old and new offset per partition). It refuses with
// an [*ActiveMembersError] while the group has members (a state other than
// Empty or Dead). A group that never committed, or never existed, is fine:
// its current offsets are reported as -1 and the commit creates it.
// With req.DryRun nothing is committed.
//
// The broker enforces the same rule at commit time: should a member join
// between the check and the commit, the commit fails and Replay returns the
// error; no partial commit is reported as success.
func Replay(ctx context.Context, adm *kadm.Client, req ReplayRequest) (Plan, error) {
	plan := Plan{Group: req.Group, To: req.To}
	if req.Group == "" {
		return plan, errors.New("replay: no group")
	}
	if len(req.Topics) == 0 {
		return plan, errors.New("replay: no topics")
	}
	if err := req.To.validate(); err != nil {
		return plan, fmt.Errorf("replay: %w", err)
	}
	req.Topics = slices.Compact(slices.Sorted(slices.Values(req.Topics)))
	for t := range req.Partitions {
		if !slices.Contains(req.Topics, t) {
			return plan, fmt.Errorf("replay: partitions given for topic %q, which is not among the replayed topics", t)
		}
	}
	if err := ensureNoMembers(ctx, adm, req.Group); err != nil {
		return plan, err
	}

	starts, err := adm.ListStartOffsets(ctx, req.Topics...)
	if err != nil {
		return plan, fmt.Errorf("replay: list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, req.Topics...)
	if err != nil {
		return plan, fmt.Errorf("replay: list end offsets: %w", err)
	}
	parts := make(map[string][]int32, len(req.Topics))
	for _, topic := range req.Topics {
		ps, err := partitionsOf(ends, topic, req.Partitions[topic])
		if err != nil {
			return plan, fmt.Errorf("replay: %w", err)
		}
		parts[topic] = ps
	}
	var atTime kadm.ListedOffsets
	if req.To.Kind == Timestamp {
		// kadm answers with the end offset for partitions without a
		// record at or after the time.
		atTime, err = adm.ListOffsetsAfterMilli(ctx, req.To.Time.UnixMilli(), req.Topics...)
		if err != nil {
			return plan, fmt.Errorf("replay: list offsets after %s: %w", req.To.Time.Format(time.RFC3339), err)
		}
	}
	current, err := adm.FetchOffsetsForTopics(ctx, req.Group, req.Topics...)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return plan, fmt.Errorf("replay: fetch offsets of group %q: %w", req.Group, err)
	}

	commit := make(kadm.Offsets)
	for _, topic := range req.Topics {
		for _, p := range parts[topic] {
			end, _ := ends.Lookup(topic, p)
			start, ok := starts.Lookup(topic, p)
			if !ok || start.Err != nil {
				return plan, fmt.Errorf("replay: no start offset for %s[%d]: %v", topic, p, start.Err)
			}
			m := Move{Topic: topic, Partition: p, Current: -1, Start: start.Offset, End: end.Offset}
			if c, ok := current.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
				m.Current = c.At
			}
			switch req.To.Kind {
			case Earliest:
				m.New = m.Start
			case Latest:
				m.New = m.End
			case Offset:
				m.New = min(max(req.To.Offset, m.Start), m.End)
				switch {
				case req.To.Offset > m.End:
					m.Note = fmt.Sprintf("offset %d is past the end: clamped to the end", req.To.Offset)
				case req.To.Offset < m.Start:
					m.Note = fmt.Sprintf("offset %d is no longer retained: clamped to the log start", req.To.Offset)
				}
			case Timestamp:
				lo, ok := atTime.Lookup(topic, p)
				switch {
				case !ok:
					return plan, fmt.Errorf("replay: no offset at time for %s[%d]", topic, p)
				case lo.Err != nil:
					return plan, fmt.Errorf("replay: offset at time for %s[%d]: %w", topic, p, lo.Err)
				case lo.Offset < 0:
					m.New = m.End
				default:
					m.New = lo.Offset
				}
				switch {
				case m.Start == m.End:
					m.Note = "empty partition"
				case m.New >= m.End:
					// kadm answers with the end offset when no record
					// is at or after the time.
					m.Note = "no record at or after the time: moved to the end, nothing re-read"
				}
			}
			plan.Moves = append(plan.Moves, m)
			commit.Add(kadm.Offset{Topic: topic, Partition: p, At: m.New, LeaderEpoch: -1})
		}
	}
	sort.Slice(plan.Moves, func(i, j int) bool {
		a, b := plan.Moves[i], plan.Moves[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	if req.DryRun {
		return plan, nil
	}
	if err := adm.CommitAllOffsets(ctx, req.Group, commit); err != nil {
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
			return plan, fmt.Errorf("replay: group %q gained members while replaying; stop them and retry: %w", req.Group, err)
		}
		return plan, fmt.Errorf("replay: commit offsets of group %q: %w", req.Group, err)
	}
	plan.Committed = true
	return plan, nil
}

// partitionsOf returns the partitions of topic to move: want when given
// (each checked to exist), else every partition in listed.
func partitionsOf(listed kadm.ListedOffsets, topic string, want []int32) ([]int32, error) {
	ps, ok := listed[topic]
	if !ok {
		return nil, fmt.Errorf("topic %q does not exist", topic)
	}
	if l, ok := ps[-1]; ok && len(ps) == 1 {
		if l.Err != nil && !errors.Is(l.Err, kerr.UnknownTopicOrPartition) {
			return nil, fmt.Errorf("topic %q: %w", topic, l.Err)
		}
		return nil, fmt.Errorf("topic %q does not exist", topic)
	}
	for p, l := range ps {
		if l.Err != nil {
			return nil, fmt.Errorf("end offset of %s[%d]: %w", topic, p, l.Err)
		}
	}
	if len(want) == 0 {
		out := make([]int32, 0, len(ps))
		for p := range ps {
			out = append(out, p)
		}
		slices.Sort(out)
		return out, nil
	}
	out := slices.Clone(want)
	slices.Sort(out)
	out = slices.Compact(out)
	for _, p := range out {
		if _, ok := ps[p]; !ok {
			return nil, fmt.Errorf("topic %q has no partition %d (it has %d)", topic, p, len(ps))
		}
	}
	return out, nil
}

// ensureNoMembers returns an *ActiveMembersError when group has members in
// either the classic protocol or the KIP-848 consumer protocol.
func ensureNoMembers(ctx context.Context, adm *kadm.Client, group string) error {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("replay: describe group %q: %w", group, err)
	}
	d, ok := described[group]
	if ok && d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
		return fmt.Errorf("replay: describe group %q: %w", group, d.Err)
	}
	if ok && d.Err == nil && (len(d.Members) > 0 || (d.State != "Empty" && d.State != "Dead" && d.State != "")) {
		return &ActiveMembersError{Group: group, State: d.State, Members: len(d.Members)}
	}
	// A KIP-848 group is invisible to the classic describe on Kafka 4.
	// Brokers without the new protocol reject this request; that means
	// there is no such group, so the error is deliberately ignored.
	cdescribed, err := adm.DescribeConsumerGroups(ctx, group)
	if err != nil {
		return nil //nolint:nilerr // see above
	}
	if c, ok := cdescribed[group]; ok && c.Err == nil && (len(c.Members) > 0 || (c.State != "Empty" && c.State != "Dead" && c.State != "")) {
		return &ActiveMembersError{Group: group, State: c.State, Members: len(c.Members)}
	}
	return nil
}
