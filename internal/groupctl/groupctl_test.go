package groupctl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/testkit"
)

// cluster hands the test a Kafka cluster (KAFKA_BROKERS when set, else
// kfake) with fresh topics named after bases (partitions each), and returns
// connection options, an admin client and the topic names.
func cluster(t *testing.T, partitions int32, bases ...string) ([]kgo.Opt, *kadm.Client, []string) {
	t.Helper()
	k := testkit.NewKafka(t, testkit.FakeOK())
	var names []string
	for _, b := range bases {
		names = append(names, k.Topic(t, b, partitions))
	}
	return k.Opts(t), k.Admin(t), names
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// produce writes n records to topic/partition with timestamps t0+i*step.
func produce(t *testing.T, opts []kgo.Opt, topic string, partition int32, n int, t0 time.Time, step time.Duration) {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf(`{"i":%d}`, i)), Timestamp: t0.Add(time.Duration(i) * step)}
		if err := cl.ProduceSync(ctxT(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// consume joins group on topic and returns the offsets of the first n
// records it receives, committing them; it then leaves the group.
func consume(t *testing.T, opts []kgo.Opt, group, topic string, n int) []int64 {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t)
	var got []int64
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %v, want %d records: %v", got, n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r.Offset) })
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func committed(t *testing.T, adm *kadm.Client, group string) map[string]map[int32]int64 {
	t.Helper()
	os, err := adm.FetchOffsets(ctxT(t), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[string]map[int32]int64{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[int32]int64{}
	os.Each(func(o kadm.OffsetResponse) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.At
	})
	return out
}

func TestReplayRefusesActiveMemberThenReplaysToTimestamp(t *testing.T) {
	t.Parallel()
	opts, adm, names := cluster(t, 1, "replay.ts")
	topic, group := names[0], testkit.Name(t, "g")
	// Recent: a real broker's time-based retention (7 days by default)
	// deletes older records within minutes, under the test.
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	produce(t, opts, topic, 0, 10, t0, time.Second)

	// A live member that consumed everything.
	member, err := kgo.NewClient(append(opts, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for seen := 0; seen < 10; {
		fs := member.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("member never received the records")
		}
		seen += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	_, err = groupctl.Replay(ctx, adm, groupctl.ReplayRequest{Group: group, Topics: []string{topic}, To: groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(5 * time.Second)}})
	var active *groupctl.ActiveMembersError
	if !errors.As(err, &active) {
		t.Fatalf("replay with a live member: err = %v, want *ActiveMembersError", err)
	}
	if want := fmt.Sprintf(`group %q has 1 active members; stop them before replaying`, group); err.Error() != want {
		t.Fatalf("error = %q, want %q", err, want)
	}
	if got := committed(t, adm, group)[topic][0]; got != 10 {
		t.Fatalf("refused replay changed the commit to %d", got)
	}

	member.Close() // leaves the group

	plan, err := groupctl.Replay(ctx, adm, groupctl.ReplayRequest{Group: group, Topics: []string{topic}, To: groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(5 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []groupctl.Move{{Topic: topic, Partition: 0, Current: 10, New: 5, Start: 0, End: 10}}
	if !plan.Committed || !slices.Equal(plan.Moves, want) {
		t.Fatalf("plan = %+v, want committed %+v", plan, want)
	}

	// A new consumer of the group re-reads exactly offsets 5..9.
	got := consume(t, opts, group, topic, 5)
	if !slices.Equal(got, []int64{5, 6, 7, 8, 9}) {
		t.Fatalf("re-read offsets %v, want 5..9", got)
	}
}

func TestReplayTargets(t *testing.T) {
	t.Parallel()
	opts, adm, names := cluster(t, 2, "replay.targets")
	topic := names[0]
	// Recent: a real broker's time-based retention (7 days by default)
	// deletes older records within minutes, under the test.
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	produce(t, opts, topic, 0, 10, t0, time.Second)  // p0: offsets 0..9 at t0..t9
	produce(t, opts, topic, 1, 4, t0, 3*time.Second) // p1: offsets 0..3 at t0, t3, t6, t9

	cases := []struct {
		name       string
		to         groupctl.Target
		partitions map[string][]int32
		want       map[int32]int64
	}{
		{"earliest", groupctl.Target{Kind: groupctl.Earliest}, nil, map[int32]int64{0: 0, 1: 0}},
		{"latest", groupctl.Target{Kind: groupctl.Latest}, nil, map[int32]int64{0: 10, 1: 4}},
		{"offset", groupctl.Target{Kind: groupctl.Offset, Offset: 3}, nil, map[int32]int64{0: 3, 1: 3}},
		{"offset clamped to end", groupctl.Target{Kind: groupctl.Offset, Offset: 7}, nil, map[int32]int64{0: 7, 1: 4}},
		{"timestamp between records", groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(4500 * time.Millisecond)}, nil, map[int32]int64{0: 5, 1: 2}},
		{"timestamp after last record", groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(time.Hour)}, nil, map[int32]int64{0: 10, 1: 4}},
		{"timestamp before first record", groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(-time.Hour)}, nil, map[int32]int64{0: 0, 1: 0}},
		{"partition subset", groupctl.Target{Kind: groupctl.Latest}, map[string][]int32{topic: {1}}, map[int32]int64{1: 4}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			group := testkit.Name(t, fmt.Sprint("g", i)) // never committed before
			plan, err := groupctl.Replay(ctxT(t), adm, groupctl.ReplayRequest{Group: group, Topics: []string{topic}, Partitions: tc.partitions, To: tc.to})
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Moves) != len(tc.want) {
				t.Fatalf("moves = %+v, want partitions %v", plan.Moves, tc.want)
			}
			for _, m := range plan.Moves {
				if m.Current != -1 || m.New != tc.want[m.Partition] {
					t.Errorf("move %+v, want current -1 new %d", m, tc.want[m.Partition])
				}
			}
			got := committed(t, adm, group)[topic]
			if len(got) != len(tc.want) {
				t.Fatalf("committed %v, want %v", got, tc.want)
			}
			for p, w := range tc.want {
				if got[p] != w {
					t.Errorf("committed p%d = %d, want %d", p, got[p], w)
				}
			}
		})
	}
}

func TestReplayDryRunCommitsNothing(t *testing.T) {
	t.Parallel()
	opts, adm, names := cluster(t, 2, "replay.dry")
	topic, group := names[0], testkit.Name(t, "g")
	produce(t, opts, topic, 0, 6, time.Now().Add(-time.Hour), time.Second)
	produce(t, opts, topic, 1, 3, time.Now().Add(-time.Hour), time.Second)
	ctx := ctxT(t)
	if err := adm.CommitAllOffsets(ctx, group, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: 4, LeaderEpoch: -1}}}); err != nil {
		t.Fatal(err)
	}
	before := committed(t, adm, group)

	plan, err := groupctl.Replay(ctx, adm, groupctl.ReplayRequest{Group: group, Topics: []string{topic}, To: groupctl.Target{Kind: groupctl.Earliest}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []groupctl.Move{
		{Topic: topic, Partition: 0, Current: 4, New: 0, Start: 0, End: 6},
		{Topic: topic, Partition: 1, Current: -1, New: 0, Start: 0, End: 3},
	}
	if plan.Committed || !slices.Equal(plan.Moves, want) {
		t.Fatalf("plan = %+v, want uncommitted %+v", plan, want)
	}
	after := committed(t, adm, group)
	if fmt.Sprint(after) != fmt.Sprint(before) || after[topic][0] != 4 {
		t.Fatalf("dry run changed commits: before %v after %v", before, after)
	}
}

func TestReplayRejectsBadRequests(t *testing.T) {
	t.Parallel()
	_, adm, names := cluster(t, 2, "replay.bad")
	topic, group, missing := names[0], testkit.Name(t, "g"), testkit.Name(t, "missing")
	cases := []struct {
		name string
		req  groupctl.ReplayRequest
		want string
	}{
		{"no group", groupctl.ReplayRequest{Topics: []string{topic}, To: groupctl.Target{Kind: groupctl.Earliest}}, "no group"},
		{"no topics", groupctl.ReplayRequest{Group: group, To: groupctl.Target{Kind: groupctl.Earliest}}, "no topics"},
		{"no target", groupctl.ReplayRequest{Group: group, Topics: []string{topic}}, "unknown target kind"},
		{"negative offset", groupctl.ReplayRequest{Group: group, Topics: []string{topic}, To: groupctl.Target{Kind: groupctl.Offset, Offset: -1}}, "negative"},
		{"unknown topic", groupctl.ReplayRequest{Group: group, Topics: []string{missing}, To: groupctl.Target{Kind: groupctl.Earliest}}, fmt.Sprintf("topic %q does not exist", missing)},
		{"unknown partition", groupctl.ReplayRequest{Group: group, Topics: []string{topic}, Partitions: map[string][]int32{topic: {7}}, To: groupctl.Target{Kind: groupctl.Earliest}}, "has no partition 7"},
		{"partition of other topic", groupctl.ReplayRequest{Group: group, Topics: []string{topic}, Partitions: map[string][]int32{"x": {0}}, To: groupctl.Target{Kind: groupctl.Earliest}}, `topic "x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := groupctl.Replay(ctxT(t), adm, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if got := committed(t, adm, group); len(got) != 0 {
		t.Fatalf("rejected requests committed %v", got)
	}
}

func TestLagExact(t *testing.T) {
	t.Parallel()
	opts, adm, names := cluster(t, 2, "lag.a", "lag.b")
	a, b, group, missingGroup := names[0], names[1], testkit.Name(t, "g"), testkit.Name(t, "missing")
	now := time.Now()
	produce(t, opts, a, 0, 10, now, time.Millisecond)
	produce(t, opts, a, 1, 5, now, time.Millisecond)
	produce(t, opts, b, 0, 7, now, time.Millisecond)
	ctx := ctxT(t)
	commits := kadm.Offsets{}
	commits.Add(kadm.Offset{Topic: a, Partition: 0, At: 3, LeaderEpoch: -1}) // lag 7
	commits.Add(kadm.Offset{Topic: a, Partition: 1, At: 5, LeaderEpoch: -1}) // lag 0
	commits.Add(kadm.Offset{Topic: b, Partition: 0, At: 2, LeaderEpoch: -1}) // lag 5
	commits.Add(kadm.Offset{Topic: b, Partition: 1, At: 0, LeaderEpoch: -1}) // lag 0 (empty)
	if err := adm.CommitAllOffsets(ctx, group, commits); err != nil {
		t.Fatal(err)
	}

	rep, err := groupctl.Lag(ctx, adm, group, missingGroup)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := rep.Group(group)
	if !ok || g.Err != nil {
		t.Fatalf("group missing or failed: %+v", g)
	}
	type row struct {
		topic          string
		p              int32
		commit, end, l int64
	}
	var got []row
	for _, p := range g.Partitions {
		got = append(got, row{p.Topic, p.Partition, p.Committed, p.End, p.Lag})
	}
	want := []row{{a, 0, 3, 10, 7}, {a, 1, 5, 5, 0}, {b, 0, 2, 7, 5}, {b, 1, 0, 0, 0}}
	if !slices.Equal(got, want) {
		t.Fatalf("partitions = %+v, want %+v", got, want)
	}
	if !slices.Equal(g.Topics, []groupctl.TopicLag{{Topic: a, Lag: 7}, {Topic: b, Lag: 5}}) || g.Total != 12 {
		t.Fatalf("totals = %+v / %d, want a:7 b:5 / 12", g.Topics, g.Total)
	}
	if g.State != "Empty" || g.Members != 0 {
		t.Fatalf("state %q members %d, want Empty 0", g.State, g.Members)
	}
	missing, ok := rep.Group(missingGroup)
	if !ok || missing.Err == nil || !strings.Contains(missing.Err.Error(), missingGroup) {
		t.Fatalf("missing group = %+v, want an error naming it", missing)
	}
	if rep.Err() == nil {
		t.Fatal("report with a missing group has no error")
	}

	// With no group named, every group the cluster knows is reported.
	all, err := groupctl.Lag(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := all.Group(group); !ok || g.Total != 12 {
		t.Fatalf("all-groups report = %+v, want %s with total 12", all, group)
	}
}

// When kadm's batched lag request fails as a whole, Lag asks group by group
// and still reports every group (kfake fails every DescribeGroups request
// that names more than one group, as one unresolvable group can in a real
// cluster).
func TestLagFallsBackGroupByGroup(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	topic := k.Topic(t, "lag.fallback", 1)
	opts := k.Opts(t)
	produce(t, opts, topic, 0, 6, time.Now(), time.Millisecond)
	g1, g2 := testkit.Name(t, "g1"), testkit.Name(t, "g2")
	ctx := ctxT(t)
	adm := k.Admin(t)
	for g, at := range map[string]int64{g1: 2, g2: 5} {
		commits := kadm.Offsets{}
		commits.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
		if err := adm.CommitAllOffsets(ctx, g, commits); err != nil {
			t.Fatal(err)
		}
	}
	batched := 0
	k.Fake().ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		if len(req.(*kmsg.DescribeGroupsRequest).Groups) < 2 {
			return nil, nil, false
		}
		batched++
		return nil, errors.New("injected: batched describe fails"), true
	})
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(1),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).Lag(ctx, g1, g2); err == nil {
		t.Fatal("the injected fault does not fail kadm's batched lag request: the test does not reach the fallback")
	}
	rep, err := groupctl.Lag(ctx, kadm.NewClient(cl), g1, g2)
	if err != nil {
		t.Fatalf("Lag failed instead of falling back: %v", err)
	}
	for g, want := range map[string]int64{g1: 4, g2: 1} {
		gl, ok := rep.Group(g)
		if !ok || gl.Err != nil || gl.Total != want {
			t.Errorf("group %s = %+v (found %v), want total lag %d and no error", g, gl, ok, want)
		}
	}
	if batched < 2 {
		t.Errorf("%d batched DescribeGroups requests seen, want one per Lag call", batched)
	}
}

// A partition whose lag could not be computed makes the report fail (the
// lag command exits non-zero), naming the group and the partition.
func TestReportErrIncludesPartitions(t *testing.T) {
	t.Parallel()
	ok := groupctl.Report{Groups: []groupctl.GroupLag{{Group: "g", Partitions: []groupctl.PartitionLag{{Topic: "t", Partition: 0, Lag: 3}}}}}
	if err := ok.Err(); err != nil {
		t.Fatalf("healthy report: %v", err)
	}
	bad := groupctl.Report{Groups: []groupctl.GroupLag{{Group: "g", Partitions: []groupctl.PartitionLag{
		{Topic: "t", Partition: 0, Lag: 3},
		{Topic: "t", Partition: 1, Lag: -1, Err: kerr.UnknownTopicOrPartition},
	}}}}
	err := bad.Err()
	if !errors.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), `group "g": t/1`) {
		t.Fatalf("Err() = %v, want the partition's error naming g and t/1", err)
	}
}
