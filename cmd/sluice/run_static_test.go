package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/schemas"
	"github.com/sluicehq/sluice/topics"
)

// member is one member of a described consumer group.
type member struct {
	id       string // the member id the coordinator gave
	instance string // "" for a dynamic member
	parts    []int32
}

// describeGroup returns the group's state and members by instance id
// (member id for dynamic members).
func describeGroup(t *testing.T, adm *kadm.Client, group string) (string, map[string]member) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dgs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	d := dgs[group]
	out := map[string]member{}
	for _, m := range d.Members {
		mb := member{id: m.MemberID}
		if m.InstanceID != nil {
			mb.instance = *m.InstanceID
		}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range c.Topics {
				mb.parts = append(mb.parts, tp.Partitions...)
			}
		}
		slices.Sort(mb.parts)
		key := mb.instance
		if key == "" {
			key = mb.id
		}
		out[key] = mb
	}
	return d.State, out
}

// KAFKA_INSTANCE_ID / --instance-id make the members static: a silver
// member stopped and started again with the same id gets its partitions
// back at once, without a rebalance (the other member keeps its partitions
// and its member id). Started under another id (what a new pod name of a
// Deployment gives) it gets nothing within the same time: the stopped
// member holds its partitions until its session times out (45 s).
func TestRunStaticMembership(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") == "" {
		t.Skip("static membership is a broker feature kfake does not model: set KAFKA_BROKERS (source the env file deploy/stack/env.sh prints)")
	}
	t.Parallel()
	k := testkit.NewKafka(t)
	pg := testkit.NewPostgres(t)
	if _, err := schemas.Migrate(testkit.Context(t), pg.URL); err != nil {
		t.Fatal(err)
	}
	prefix := testkit.Name(t, "") + "."
	groupPrefix := testkit.Name(t, "g") + "-"
	group := groupPrefix + "silver"
	createTopics(t, k, 4, prefix, topics.BronzeRecords)
	createTopics(t, k, 1, prefix, topics.BronzeDLQ, topics.ControlFlags)
	adm := k.Admin(t)
	start := func(id string) func() error {
		_, stop := startCLI(t, "run", "silver", "--brokers", strings.Join(k.Brokers, ","), "--database-url", pg.URL,
			"--ops-addr", "", "--log-level", "error", "--topic-prefix", prefix, "--group-prefix", groupPrefix, "--instance-id", id)
		return stop
	}
	a, b := "a-"+group, "b-"+group // <id>-<group>

	stopA := start("a")
	start("b")
	var before map[string]member
	testkit.WaitFor(t, 90*time.Second, "two static members sharing the 4 partitions", func() bool {
		state, ms := describeGroup(t, adm, group)
		before = ms
		return state == "Stable" && len(ms) == 2 && len(ms[a].parts) > 0 && len(ms[b].parts) > 0 && len(ms[a].parts)+len(ms[b].parts) == 4
	})

	if err := stopA(); err != nil {
		t.Fatalf("stop member a: %v", err)
	}
	restarted := time.Now()
	stopA = start("a")
	var after map[string]member
	for {
		state, ms := describeGroup(t, adm, group)
		if ms[b].id != before[b].id || !slices.Equal(ms[b].parts, before[b].parts) {
			t.Fatalf("member b was rebalanced while a restarted: %+v, before %+v", ms[b], before[b])
		}
		if state == "Stable" && ms[a].id != "" && ms[a].id != before[a].id {
			after = ms
			break
		}
		if time.Since(restarted) > 5*time.Second {
			t.Fatalf("a restarted with the same instance id is not back in its group after %v: %s %+v", time.Since(restarted), state, ms)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(after[a].parts, before[a].parts) {
		t.Fatalf("a came back with partitions %v, had %v", after[a].parts, before[a].parts)
	}
	t.Logf("a back with partitions %v after %v", after[a].parts, time.Since(restarted))
	// ... and consumes them: a valid bar on each of its partitions
	// becomes a row.
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var syms []string
	for _, p := range after[a].parts {
		sym := "STA" + string(rune('A'+p))
		syms = append(syms, sym)
		v := `{"task_type":"ta.bar","payload":{"symbol":"` + sym + `","trade_date":"2024-05-02","open":1,"high":2,"low":1,"close":2,"volume":10}}`
		if err := cl.ProduceSync(testkit.Context(t), &kgo.Record{Topic: prefix + topics.BronzeRecords, Partition: p, Key: []byte(sym), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(testkit.Context(t), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testkit.WaitFor(t, 30*time.Second, "the restarted member to write the bars of its partitions", func() bool {
		var n int
		if err := conn.QueryRow(testkit.Context(t), "SELECT count(*) FROM ta_silver WHERE symbol = ANY($1)", syms).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(syms)
	})

	// Under another instance id the stopped member still holds its
	// partitions: nothing reaches the new member within the same 5 s.
	if err := stopA(); err != nil {
		t.Fatalf("stop member a: %v", err)
	}
	restarted = time.Now()
	start("a2")
	a2 := "a2-" + group
	joined := false
	for time.Since(restarted) < 5*time.Second {
		_, ms := describeGroup(t, adm, group)
		if len(ms[a2].parts) > 0 {
			t.Fatalf("a2 got partitions %v after %v while a's session was still open: %+v", ms[a2].parts, time.Since(restarted), ms)
		}
		if _, ok := ms[a]; !ok {
			t.Fatalf("a left the group on stop (a static member must not): %+v", ms)
		}
		joined = joined || ms[a2].id != ""
		time.Sleep(100 * time.Millisecond)
	}
	if !joined {
		t.Logf("a2 had not joined within 5 s either")
	}

	// Removing the old instance (an operator replacing a host does this,
	// KIP-345) hands its partitions over at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(a)); err != nil || res.Error() != nil {
		t.Fatalf("remove instance %s: %v %v", a, err, res.Error())
	}
	testkit.WaitFor(t, 30*time.Second, "a2 to take over a's partitions", func() bool {
		state, ms := describeGroup(t, adm, group)
		_, stale := ms[a]
		return state == "Stable" && !stale && len(ms[a2].parts)+len(ms[b].parts) == 4 && len(ms[a2].parts) > 0
	})
}
