package groupctl_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/testkit"
)

// A plan says when a partition does not land where the user asked: a time
// after its last record (moved to the end, nothing re-read, unlike the
// partitions that have records then), an empty partition, an offset past
// the end or below the log start.
func TestReplayPlanNotes(t *testing.T) {
	t.Parallel()
	opts, adm, names := cluster(t, 3, "replay.notes")
	topic := names[0]
	// Recent: a real broker's time-based retention (7 days by default)
	// deletes older records within minutes, under the test.
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	produce(t, opts, topic, 0, 10, t0, time.Second)         // p0: t0..t9
	produce(t, opts, topic, 1, 4, t0, 100*time.Millisecond) // p1: t0..t0+300ms
	// p2 stays empty.
	ctx := ctxT(t)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 3})
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		to   groupctl.Target
		want map[int32][2]string // partition → new offset, note substring ("" = no note)
	}{
		{"time with records only in p0", groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(5 * time.Second)},
			map[int32][2]string{0: {"5", ""}, 1: {"4", "no record at or after the time"}, 2: {"0", "empty partition"}}},
		{"time before the log start", groupctl.Target{Kind: groupctl.Timestamp, Time: t0.Add(-time.Hour)},
			map[int32][2]string{0: {"3", ""}, 1: {"0", ""}, 2: {"0", "empty partition"}}},
		{"offset", groupctl.Target{Kind: groupctl.Offset, Offset: 2},
			map[int32][2]string{0: {"3", "offset 2 is no longer retained"}, 1: {"2", ""}, 2: {"0", "offset 2 is past the end"}}},
		{"earliest", groupctl.Target{Kind: groupctl.Earliest},
			map[int32][2]string{0: {"3", ""}, 1: {"0", ""}, 2: {"0", ""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := groupctl.Replay(ctxT(t), adm, groupctl.ReplayRequest{Group: testkit.Name(t, "g"), Topics: []string{topic}, To: tc.to, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Moves) != 3 {
				t.Fatalf("moves = %+v", plan.Moves)
			}
			for _, m := range plan.Moves {
				w := tc.want[m.Partition]
				if fmt.Sprint(m.New) != w[0] || (w[1] == "") != (m.Note == "") || !strings.Contains(m.Note, w[1]) {
					t.Errorf("p%d: new %d note %q, want new %s note containing %q", m.Partition, m.New, m.Note, w[0], w[1])
				}
			}
		})
	}
}
