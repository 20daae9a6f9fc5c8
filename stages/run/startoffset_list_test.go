package run_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
)

// A new member with StartOffset "latest" that pins a partition without a
// commit is not stopped by another partition of the same topic whose end
// cannot be listed (its leader down, say): that partition has a commit, so
// its end is not needed. The member starts the pinned partition at its end
// (committed for the group) and resumes the other at its commit; before,
// the listing error of the other partition failed every group session, so
// the member consumed neither.
func TestLatestPinIgnoresOtherPartitionsListErrors(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.ForceFake())
	cfg := baseConfig(t, k, 2)
	cfg.StartOffset = "latest"
	topic := cfg.Topics[0]
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := k.Admin(t)

	produceTo := func(p int32, n int, prefix string) []*kgo.Record {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Partition: p, Key: []byte("k"), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce to partition %d: %v", p, err)
		}
		return recs
	}
	const old0, old1, commit1 = 20, 10, 4
	produceTo(0, old0, "old")
	produceTo(1, old1, "old")
	// Partition 1 has a commit (the group consumed it before); partition
	// 0 has none and is pinned at its end.
	var commit kadm.Offsets
	commit.AddOffset(topic, 1, commit1, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CommitOffsets(ctx, cfg.Group, commit); err != nil {
		t.Fatal(err)
	}

	// Every listing of partition 1 fails; partition 0's end is old0 (no
	// record is produced to it until its start is committed).
	k.Fake().ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.ListOffsetsRequest)
		resp := rq.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range rq.Topics {
			if rt.Topic != topic {
				return nil, nil, false
			}
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = p.Partition
				sp.LeaderEpoch = -1
				switch {
				case p.Partition != 0:
					sp.ErrorCode = kerr.UnknownServerError.Code
				case p.Timestamp == -1:
					sp.Offset = old0
				default:
					sp.Offset = 0
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	sink := memsink.New[msg]()
	_, stop := start(t, k, cfg, passthrough, sink)
	testkit.WaitFor(t, 20*time.Second, "partition 0's start committed for the group", func() bool {
		c, ok := testkit.Committed(t, adm, cfg.Group, topic)[0]
		return ok && c == old0
	})
	const more = 5
	produceTo(0, more, "new")
	produceTo(1, more, "new")
	want := map[int32]int{0: more, 1: old1 + more - commit1}
	testkit.WaitFor(t, 20*time.Second, fmt.Sprintf("records written per partition %v", want), func() bool {
		got := map[int32]int{}
		for _, m := range sink.Items() {
			got[m.Source.Partition]++
		}
		return got[0] >= want[0] && got[1] >= want[1]
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, m := range sink.Items() {
		if m.Source.Partition == 0 && m.Source.Offset < old0 || m.Source.Partition == 1 && m.Source.Offset < commit1 {
			t.Errorf("wrote %d/%d (%s), before the partition's start", m.Source.Partition, m.Source.Offset, m.Value)
		}
	}
}
