package groupctl_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/testkit"
)

// A group using the KIP-848 consumer protocol (Kafka 4) is invisible to the
// classic DescribeGroups that kadm's lag uses: Lag reports it like a classic
// group — state, members, committed and end offsets — instead of "group id
// does not exist", both when named and when every group is reported.
func TestLagConsumerProtocolGroup(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.FakeOK())
	topic, group := k.Topic(t, "lag.848", 2), testkit.Name(t, "g")
	opts, adm := k.Opts(t), k.Admin(t)
	// kfake names the topics of a KIP-848 assignment by ID only: the
	// partitions' members are known on a real broker.
	memberOf := func(id string) string {
		if k.IsReal() {
			return id
		}
		return ""
	}
	produce(t, opts, topic, 0, 5, time.Now(), time.Millisecond)
	member, err := kgo.NewClient(append(opts, kgo.ClientID("member-848"), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	ctx := ctxT(t)
	for seen := 0; seen < 5; {
		fs := member.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the member received %d of 5 records", seen)
		}
		seen += fs.NumRecords()
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	produce(t, opts, topic, 0, 2, time.Now(), time.Millisecond) // lag 2 on p0

	check := func(rep groupctl.Report, state string, members int, member string) {
		t.Helper()
		g, ok := rep.Group(group)
		if !ok || g.Err != nil {
			t.Fatalf("group %s: found %v, %+v", group, ok, g)
		}
		if g.State != state || g.Members != members || g.Total != 2 {
			t.Fatalf("group = state %q members %d total %d, want %s %d 2: %+v", g.State, g.Members, g.Total, state, members, g)
		}
		if len(g.Partitions) != 2 {
			t.Fatalf("partitions = %+v, want p0 and p1", g.Partitions)
		}
		p0 := g.Partitions[0]
		if p0.Topic != topic || p0.Partition != 0 || p0.Committed != 5 || p0.End != 7 || p0.Lag != 2 || p0.Member != member {
			t.Fatalf("p0 = %+v, want committed 5 end 7 lag 2 member %q", p0, member)
		}
	}
	// The member may still be reconciling its assignment: wait until the
	// broker shows both partitions assigned.
	var rep groupctl.Report
	testkit.WaitFor(t, 20*time.Second, "the group's assignment", func() bool {
		rep, err = groupctl.Lag(ctx, adm, group)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := rep.Group(group)
		return g.Err == nil && len(g.Partitions) == 2 && g.Partitions[1].Member == memberOf("member-848")
	})
	check(rep, "Stable", 1, memberOf("member-848"))
	all, err := groupctl.Lag(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	check(all, "Stable", 1, memberOf("member-848"))

	member.Close() // leaves the group
	rep, err = groupctl.Lag(ctx, adm, group)
	if err != nil {
		t.Fatal(err)
	}
	check(rep, "Empty", 0, "")
}
