package topics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Action says what Ensure did to a topic.
type Action string

// Actions reported by Ensure.
const (
	// ActionCreated: the topic did not exist and was created.
	ActionCreated Action = "created"
	// ActionConfig: managed configs differed and were set.
	ActionConfig Action = "config"
	// ActionPartitions: the topic had fewer partitions and was grown.
	ActionPartitions Action = "partitions"
	// ActionOK: the topic already matched its spec.
	ActionOK Action = "ok"
	// ActionWarning: a difference Ensure never repairs (more partitions
	// than the spec, co-partitioned topics with different counts, another
	// replication factor). An operator has to decide.
	ActionWarning Action = "warning"
)

// Change is one thing Ensure did or found.
type Change struct {
	Topic  string
	Action Action
	Detail string
}

// Warnings returns the changes whose Action is ActionWarning.
func Warnings(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		if c.Action == ActionWarning {
			out = append(out, c)
		}
	}
	return out
}

// Ensure makes the cluster match specs, idempotently, and reports what it did
// in spec order:
//
//   - a missing topic is created with its partitions, replication factor and
//     managed configs (Spec.TopicConfigs);
//   - a managed config whose value differs (or is absent) is set with an
//     incremental alter; configs Ensure does not manage are left alone;
//   - a topic with fewer partitions than its spec is grown to the spec's
//     count. Growing a keyed topic moves keys to other partitions: grow a
//     co-partitioned pair together (Select does) and only while its
//     consumers are stopped;
//   - more partitions than the spec, a replication factor other than the
//     spec's (when the spec sets one), and co-partitioned topics whose actual
//     counts differ are reported as ActionWarning and never changed;
//   - a topic that needed nothing gets one ActionOK change, so a second call
//     reports only ActionOK (and the same warnings).
//
// Before returning, Ensure waits (up to 10 s) until brokers show every
// change it made, so a caller that reads right after sees them.
//
// specs are validated first. The error reports a failure to talk to the
// cluster or a rejected create/alter; the changes made before it are
// returned with it. Ensure is safe to run concurrently from several processes
// (a topic created by someone else in between is aligned instead; a grow
// refused because someone else already grew the topic counts as done).
func Ensure(ctx context.Context, adm *kadm.Client, specs []Spec) ([]Change, error) {
	if err := Validate(specs); err != nil {
		return nil, fmt.Errorf("topics: invalid specs: %w", err)
	}
	if len(specs) == 0 {
		return nil, nil
	}
	details, err := describeTopics(ctx, adm, Names(specs)...)
	if err != nil {
		return nil, fmt.Errorf("topics: describe %d topics: %w", len(specs), err)
	}

	var (
		changes  []Change
		existing []Spec
		actual   = make(map[string]int32, len(specs))
	)
	for _, s := range specs {
		d, ok := details[s.Name]
		switch {
		case ok && d.Err == nil:
			existing = append(existing, s)
			continue
		case ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			return changes, fmt.Errorf("topics: describe %s: %w", s.Name, d.Err)
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, s.ReplicationFactor, configPtrs(s.TopicConfigs()), s.Name)
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Created concurrently: align it like any existing topic.
			existing = append(existing, s)
			continue
		case err != nil:
			return changes, fmt.Errorf("topics: create %s: %w%s", s.Name, err, errMessage(resp.ErrMessage))
		}
		actual[s.Name] = s.Partitions
		if resp.NumPartitions > 0 {
			actual[s.Name] = resp.NumPartitions
		}
		changes = append(changes, Change{Topic: s.Name, Action: ActionCreated, Detail: describeSpec(s)})
	}

	if len(existing) > 0 {
		cs, err := align(ctx, adm, existing, details, actual)
		changes = append(changes, cs...)
		if err != nil {
			return changes, err
		}
	}

	// Co-partitioned topics must end up with equal counts.
	for _, s := range specs {
		if s.CoPartitionedWith == "" {
			continue
		}
		if a, b := actual[s.Name], actual[s.CoPartitionedWith]; a != b {
			changes = append(changes, Change{Topic: s.Name, Action: ActionWarning,
				Detail: fmt.Sprintf("has %d partitions but co-partitioned %s has %d", a, s.CoPartitionedWith, b)})
		}
	}
	changes = sortChanges(specs, changes)

	// Wait until what changed is visible, so that a caller (or a second
	// Ensure) that reads right after sees it.
	var touched []Spec
	for _, s := range specs {
		for _, c := range changes {
			if c.Topic == s.Name && (c.Action == ActionCreated || c.Action == ActionConfig || c.Action == ActionPartitions) {
				touched = append(touched, s)
				break
			}
		}
	}
	if err := settle(ctx, adm, touched, actual); err != nil {
		return changes, err
	}
	return changes, nil
}

// settleWithin bounds how long Ensure waits for its changes to become
// visible in broker metadata and described configs.
const settleWithin = 10 * time.Second

// settle waits until every spec's topic is in broker metadata with
// partitions[name] partitions and describes its managed configs with the
// spec's values. Brokers apply creations, partition changes and config
// changes from the controller asynchronously, so a read right after the
// change may still see the old state.
func settle(ctx context.Context, adm *kadm.Client, specs []Spec, partitions map[string]int32) error {
	if len(specs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, settleWithin)
	defer cancel()
	names := Names(specs)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		pending, err := unsettled(ctx, adm, specs, names, partitions)
		if err == nil && pending == "" {
			return nil
		}
		if err != nil {
			pending = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics: changes not visible within %v: %s", settleWithin, pending)
		case <-time.After(wait):
		}
	}
}

// unsettled describes the first difference between the cluster and specs,
// or "" when there is none.
func unsettled(ctx context.Context, adm *kadm.Client, specs []Spec, names []string, partitions map[string]int32) (string, error) {
	details, err := describeTopics(ctx, adm, names...)
	if err != nil {
		return "", err
	}
	for _, s := range specs {
		d := details[s.Name]
		if d.Err != nil {
			return fmt.Sprintf("%s: %v", s.Name, d.Err), nil
		}
		if n := int32(len(d.Partitions)); n != partitions[s.Name] {
			return fmt.Sprintf("%s: %d partitions, want %d", s.Name, n, partitions[s.Name]), nil
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return "", err
	}
	for _, s := range specs {
		rc, err := rcs.On(s.Name, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return fmt.Sprintf("%s: describe configs: %v", s.Name, err), nil
		}
		have := make(map[string]string, len(rc.Configs))
		for _, c := range rc.Configs {
			have[c.Key] = c.MaybeValue()
		}
		for k, v := range s.TopicConfigs() {
			if !sameConfig(have[k], v) {
				return fmt.Sprintf("%s: %s=%q, want %q", s.Name, k, have[k], v), nil
			}
		}
	}
	return "", nil
}

// align brings existing topics in line with their specs and records their
// final partition counts in actual.
func align(ctx context.Context, adm *kadm.Client, specs []Spec, details kadm.TopicDetails, actual map[string]int32) ([]Change, error) {
	var changes []Change
	// Topics created concurrently are not in details yet: describe them again.
	var missing []string
	for _, s := range specs {
		if d, ok := details[s.Name]; !ok || d.Err != nil {
			missing = append(missing, s.Name)
		}
	}
	if len(missing) > 0 {
		more, err := awaitTopics(ctx, adm, missing)
		if err != nil {
			return nil, err
		}
		details = maps.Clone(details)
		maps.Copy(details, more)
	}

	rcs, err := adm.DescribeTopicConfigs(ctx, Names(specs)...)
	if err != nil {
		return nil, fmt.Errorf("topics: describe configs: %w", err)
	}
	for _, s := range specs {
		d := details[s.Name]
		if d.Err != nil {
			return changes, fmt.Errorf("topics: describe %s: %w", s.Name, d.Err)
		}
		rc, err := rcs.On(s.Name, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return changes, fmt.Errorf("topics: describe configs of %s: %w%s", s.Name, err, errMessage(rc.ErrMessage))
		}
		have := make(map[string]*string, len(rc.Configs))
		for _, c := range rc.Configs {
			have[c.Key] = c.Value
		}

		before := len(changes)
		var (
			alters []kadm.AlterConfig
			diffs  []string
		)
		want := s.TopicConfigs()
		for _, k := range slices.Sorted(maps.Keys(want)) {
			v := want[k]
			cur, ok := have[k]
			if ok && cur != nil && sameConfig(*cur, v) {
				continue
			}
			old := "unset"
			if ok && cur != nil {
				old = *cur
			}
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)})
			diffs = append(diffs, fmt.Sprintf("%s %s→%s", k, old, v))
		}
		if len(alters) > 0 {
			resps, err := adm.AlterTopicConfigs(ctx, alters, s.Name)
			if err == nil {
				var r kadm.AlterConfigsResponse
				r, err = resps.On(s.Name, nil)
				if err == nil && r.Err != nil {
					err = fmt.Errorf("%w%s", r.Err, errMessage(r.ErrMessage))
				}
			}
			if err != nil {
				return changes, fmt.Errorf("topics: alter configs of %s (%s): %w", s.Name, strings.Join(diffs, ", "), err)
			}
			changes = append(changes, Change{Topic: s.Name, Action: ActionConfig, Detail: strings.Join(diffs, ", ")})
		}

		n := int32(len(d.Partitions))
		actual[s.Name] = n
		if n < s.Partitions {
			resps, err := adm.UpdatePartitions(ctx, int(s.Partitions), s.Name)
			if err == nil {
				err = resps.Error()
			}
			grown := true
			if errors.Is(err, kerr.InvalidPartitions) {
				// Brokers refuse a count that is not above the current
				// one: a concurrent Ensure grew the topic after it was
				// described. That is success when it now has enough.
				if now, ok := grownElsewhere(ctx, adm, s.Name, s.Partitions); ok {
					n, err, grown = now, nil, false
					actual[s.Name] = n
				}
			}
			if err != nil {
				return changes, fmt.Errorf("topics: grow %s from %d to %d partitions: %w", s.Name, n, s.Partitions, err)
			}
			if grown {
				actual[s.Name] = s.Partitions
				changes = append(changes, Change{Topic: s.Name, Action: ActionPartitions, Detail: fmt.Sprintf("%d→%d", n, s.Partitions)})
			}
		}
		if n > s.Partitions {
			changes = append(changes, Change{Topic: s.Name, Action: ActionWarning,
				Detail: fmt.Sprintf("has %d partitions, catalog wants %d: partitions are never reduced", n, s.Partitions)})
		}
		if rf := replicationFactor(d); s.ReplicationFactor > 0 && rf > 0 && rf != s.ReplicationFactor {
			changes = append(changes, Change{Topic: s.Name, Action: ActionWarning,
				Detail: fmt.Sprintf("replication factor %d, catalog wants %d: not changed (needs a reassignment)", rf, s.ReplicationFactor)})
		}
		if len(changes) == before {
			changes = append(changes, Change{Topic: s.Name, Action: ActionOK, Detail: fmt.Sprintf("partitions=%d, cleanup.policy=%s", n, s.Cleanup)})
		}
	}
	return changes, nil
}

// describeTopics issues a fresh metadata request for topics. kadm answers
// ListTopics from the client's metadata cache (up to MetadataMinAge old, 5 s
// by default), which still says "unknown topic" right after a create and
// shows the old partition count right after a grow; asking for authorized
// operations makes kadm bypass the cache, and the direct response refreshes
// the cache that later offset and config requests use.
func describeTopics(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.TopicDetails, error) {
	return adm.ListTopics(kadm.WithAuthorizedOps(ctx), topics...)
}

// awaitTopicsFor bounds how long Ensure waits for a topic that the cluster
// says exists (TopicAlreadyExists) to appear in broker metadata.
const awaitTopicsFor = 10 * time.Second

// awaitTopics describes topics that were just created by someone else,
// retrying while brokers still answer "unknown topic": a KRaft broker's
// metadata lags the controller's by a moment.
func awaitTopics(ctx context.Context, adm *kadm.Client, topics []string) (kadm.TopicDetails, error) {
	ctx, cancel := context.WithTimeout(ctx, awaitTopicsFor)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		d, err := describeTopics(ctx, adm, topics...)
		if err != nil {
			return nil, fmt.Errorf("topics: describe %s: %w", strings.Join(topics, ", "), err)
		}
		var unknown error
		for _, t := range topics {
			if e := d[t].Err; e != nil {
				if !errors.Is(e, kerr.UnknownTopicOrPartition) && !errors.Is(e, kerr.LeaderNotAvailable) {
					return nil, fmt.Errorf("topics: describe %s: %w", t, e)
				}
				unknown = fmt.Errorf("topics: describe %s: %w", t, e)
			}
		}
		if unknown == nil {
			return d, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (the topic exists but did not appear in metadata within %v)", unknown, awaitTopicsFor)
		case <-time.After(wait):
		}
	}
}

// grownElsewhere reports whether topic has (or within awaitTopicsFor comes
// to have, as broker metadata catches up with the controller) at least want
// partitions, and how many it has then. Ensure asks after a grow was refused
// with INVALID_PARTITIONS, which is what a concurrent grow looks like.
func grownElsewhere(ctx context.Context, adm *kadm.Client, topic string, want int32) (int32, bool) {
	ctx, cancel := context.WithTimeout(ctx, awaitTopicsFor)
	defer cancel()
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		d, err := describeTopics(ctx, adm, topic)
		if err == nil && d[topic].Err == nil {
			if n := int32(len(d[topic].Partitions)); n >= want {
				return n, true
			}
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(wait):
		}
	}
}

// sortChanges orders changes by the topic's position in specs, keeping the
// relative order of one topic's changes.
func sortChanges(specs []Spec, changes []Change) []Change {
	pos := make(map[string]int, len(specs))
	for i, s := range specs {
		pos[s.Name] = i
	}
	slices.SortStableFunc(changes, func(a, b Change) int { return pos[a.Topic] - pos[b.Topic] })
	return changes
}

func replicationFactor(d kadm.TopicDetail) int16 {
	for _, p := range d.Partitions {
		return int16(len(p.Replicas))
	}
	return 0
}

// sameConfig compares config values, numerically when both are numbers
// (brokers may render "0.1" as "0.10").
func sameConfig(have, want string) bool {
	have, want = strings.TrimSpace(have), strings.TrimSpace(want)
	if have == want {
		return true
	}
	a, errA := strconv.ParseFloat(have, 64)
	b, errB := strconv.ParseFloat(want, 64)
	return errA == nil && errB == nil && a == b
}

func configPtrs(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = kadm.StringPtr(v)
	}
	return out
}

func describeSpec(s Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "partitions=%d", s.Partitions)
	if s.ReplicationFactor > 0 {
		fmt.Fprintf(&b, ", replication.factor=%d", s.ReplicationFactor)
	}
	cfg := s.TopicConfigs()
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		fmt.Fprintf(&b, ", %s=%s", k, cfg[k])
	}
	return b.String()
}

func errMessage(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}

func retentionMs(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// parseRetention turns a retention.ms value into a Duration (Infinite for
// negative values, BrokerDefault when unparsable or empty).
func parseRetention(v string) time.Duration {
	ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	switch {
	case err != nil:
		return BrokerDefault
	case ms < 0:
		return Infinite
	default:
		return time.Duration(ms) * time.Millisecond
	}
}
