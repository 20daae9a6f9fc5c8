package topics_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/topics"
)

func actions(changes []topics.Change) map[string][]string {
	m := map[string][]string{}
	for _, c := range changes {
		m[c.Topic] = append(m[c.Topic], string(c.Action))
	}
	return m
}

func TestEnsureCreatesCatalogThenIsIdempotent(t *testing.T) {
	t.Parallel()
	_, adm, p := cluster(t)
	ctx := testContext(t)
	specs, err := topics.Select(topics.Catalog(), topics.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}

	changes, err := topics.Ensure(ctx, adm, specs)
	if err != nil {
		t.Fatalf("first Ensure: %v (changes %v)", err, changes)
	}
	if len(changes) != len(specs) {
		t.Fatalf("first Ensure: %d changes, want %d: %v", len(changes), len(specs), changes)
	}
	for i, c := range changes {
		if c.Topic != specs[i].Name || c.Action != topics.ActionCreated {
			t.Errorf("change %d = %+v, want created %s", i, c, specs[i].Name)
		}
	}

	for _, s := range specs {
		if n := partitionCount(t, adm, s.Name); n != int(s.Partitions) {
			t.Errorf("%s: %d partitions, want %d", s.Name, n, s.Partitions)
		}
		if got := topicConfig(t, adm, s.Name, "cleanup.policy"); got != s.Cleanup {
			t.Errorf("%s: cleanup.policy %q, want %q", s.Name, got, s.Cleanup)
		}
		if s.Retention != topics.BrokerDefault {
			want := strconv.FormatInt(s.Retention.Milliseconds(), 10)
			if got := topicConfig(t, adm, s.Name, "retention.ms"); got != want {
				t.Errorf("%s: retention.ms %q, want %q", s.Name, got, want)
			}
		}
		for k, v := range s.Configs {
			if got := topicConfig(t, adm, s.Name, k); got != v {
				t.Errorf("%s: %s %q, want %q", s.Name, k, got, v)
			}
		}
	}

	again, err := topics.Ensure(ctx, adm, specs)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if len(again) != len(specs) {
		t.Fatalf("second Ensure: %d changes, want %d: %v", len(again), len(specs), again)
	}
	for _, c := range again {
		if c.Action != topics.ActionOK {
			t.Errorf("second Ensure: %+v, want only ok", c)
		}
	}
}

func TestEnsureAlignsDrift(t *testing.T) {
	t.Parallel()
	_, adm, p := cluster(t)
	ctx := testContext(t)
	specs, err := topics.Select(topics.Catalog(), topics.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	pick := func(names ...string) []topics.Spec {
		var out []topics.Spec
		for _, s := range specs {
			for _, n := range names {
				if s.Name == p+n {
					out = append(out, s)
				}
			}
		}
		return out
	}
	bronze, flags := p+topics.BronzeRecords, p+topics.ControlFlags
	// Wrong policy and too few partitions.
	mustCreate(t, adm, bronze, 2, map[string]string{"cleanup.policy": "compact", "retention.ms": "1000"})
	// A compacted topic created without tuning, plus an unmanaged config
	// that Ensure must leave alone.
	mustCreate(t, adm, flags, 1, map[string]string{"cleanup.policy": "compact", "max.message.bytes": "200000"})

	sel := pick(topics.BronzeRecords, topics.ControlFlags)
	changes, err := topics.Ensure(ctx, adm, sel)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	got := actions(changes)
	if fmt.Sprint(got[bronze]) != "[config partitions]" || fmt.Sprint(got[flags]) != "[config]" {
		t.Fatalf("actions = %v, changes %+v", got, changes)
	}
	for _, c := range changes {
		switch {
		case c.Topic == bronze && c.Action == topics.ActionConfig:
			for _, want := range []string{"cleanup.policy compact→delete", "retention.ms 1000→604800000"} {
				if !strings.Contains(c.Detail, want) {
					t.Errorf("bronze config detail %q lacks %q", c.Detail, want)
				}
			}
		case c.Topic == bronze && c.Action == topics.ActionPartitions:
			if c.Detail != "2→6" {
				t.Errorf("bronze partitions detail %q, want 2→6", c.Detail)
			}
		case c.Topic == flags:
			if !strings.Contains(c.Detail, "min.cleanable.dirty.ratio") || strings.Contains(c.Detail, "cleanup.policy") {
				t.Errorf("flags config detail %q", c.Detail)
			}
		}
	}
	if v := topicConfig(t, adm, bronze, "cleanup.policy"); v != "delete" {
		t.Errorf("bronze cleanup.policy after Ensure = %q", v)
	}
	if v := topicConfig(t, adm, bronze, "retention.ms"); v != "604800000" {
		t.Errorf("bronze retention.ms after Ensure = %q", v)
	}
	if n := partitionCount(t, adm, bronze); n != 6 {
		t.Errorf("bronze partitions after Ensure = %d, want 6", n)
	}
	if v := topicConfig(t, adm, flags, "min.cleanable.dirty.ratio"); v != "0.1" {
		t.Errorf("flags min.cleanable.dirty.ratio = %q", v)
	}
	if v := topicConfig(t, adm, flags, "max.message.bytes"); v != "200000" {
		t.Errorf("unmanaged max.message.bytes changed to %q", v)
	}

	again, err := topics.Ensure(ctx, adm, sel)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(again); fmt.Sprint(got[bronze], got[flags]) != "[ok] [ok]" {
		t.Errorf("after alignment: %+v", again)
	}
}

func TestEnsureWarnsOnReductionAndCoPartitionMismatch(t *testing.T) {
	t.Parallel()
	_, adm, p := cluster(t)
	ctx := testContext(t)
	specs, err := topics.Select(topics.Catalog(), topics.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	var sel []topics.Spec
	for _, s := range specs {
		if s.Name == p+topics.IngestTasks || s.Name == p+topics.IngestJobs {
			sel = append(sel, s)
		}
	}
	tasks, jobs := p+topics.IngestTasks, p+topics.IngestJobs
	mustCreate(t, adm, tasks, 5, map[string]string{"cleanup.policy": "delete", "retention.ms": "604800000"})

	changes, err := topics.Ensure(ctx, adm, sel)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	got := actions(changes)
	if fmt.Sprint(got[tasks]) != "[warning]" || fmt.Sprint(got[jobs]) != "[created warning]" {
		t.Fatalf("actions = %v (%+v)", got, changes)
	}
	w := topics.Warnings(changes)
	if len(w) != 2 {
		t.Fatalf("warnings = %+v", w)
	}
	if !strings.Contains(w[0].Detail, "has 5 partitions, catalog wants 3") {
		t.Errorf("reduction warning %q", w[0].Detail)
	}
	if !strings.Contains(w[1].Detail, "has 3 partitions but co-partitioned "+tasks+" has 5") {
		t.Errorf("co-partition warning %q", w[1].Detail)
	}
	if n := partitionCount(t, adm, tasks); n != 5 {
		t.Errorf("partitions were reduced to %d", n)
	}
}

func TestEnsureRejectsInvalidSpecs(t *testing.T) {
	t.Parallel()
	_, adm, p := cluster(t)
	bad := []topics.Spec{{Name: p + "x", Partitions: 1, ReplicationFactor: -1, Cleanup: "forever"}}
	if _, err := topics.Ensure(testContext(t), adm, bad); err == nil || !strings.Contains(err.Error(), "unknown cleanup policy") {
		t.Fatalf("err = %v", err)
	}
	d, err := adm.ListTopics(kadm.WithAuthorizedOps(testContext(t)), p+"x")
	if err != nil {
		t.Fatal(err)
	}
	if d[p+"x"].Err == nil {
		t.Errorf("an invalid spec was created")
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	cl, adm, p := cluster(t)
	ctx := testContext(t)
	specs, err := topics.Select(topics.Catalog(), topics.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	bronze, flags := p+topics.BronzeRecords, p+topics.ControlFlags
	var sel []topics.Spec
	for _, s := range specs {
		if s.Name == bronze || s.Name == flags {
			sel = append(sel, s)
		}
	}
	if _, err := topics.Ensure(ctx, adm, sel); err != nil {
		t.Fatal(err)
	}

	const n = 50
	perPartition := map[int32]int64{}
	for i := range n {
		r := &kgo.Record{Topic: bronze, Key: []byte(fmt.Sprintf("SYM%02d", i)), Value: []byte(`{}`)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		perPartition[r.Partition]++
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: flags, Key: []byte("SCRAPE_SLOW"), Value: []byte(`{"value":true}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	missing := p + "missing"
	infos, err := topics.List(ctx, adm, []string{bronze, flags, missing})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(infos) != 3 {
		t.Fatalf("infos = %+v", infos)
	}
	b, f, m := infos[0], infos[1], infos[2]
	if b.Topic != bronze || !b.Exists || b.Partitions != 6 || b.Cleanup != "delete" || b.Retention != topics.DataRetention {
		t.Errorf("bronze info = %+v", b)
	}
	if b.Records != n {
		t.Errorf("bronze records = %d, want %d", b.Records, n)
	}
	if len(b.Offsets) != 6 {
		t.Fatalf("bronze offsets = %+v", b.Offsets)
	}
	for i, o := range b.Offsets {
		if o.Partition != int32(i) || o.Start != 0 || o.End != perPartition[o.Partition] {
			t.Errorf("partition %d offsets %+v, want start 0 end %d", i, o, perPartition[o.Partition])
		}
	}
	if f.Topic != flags || f.Cleanup != "compact" || f.Records != 1 || f.Partitions != 1 {
		t.Errorf("flags info = %+v", f)
	}
	if m.Topic != missing || m.Exists || m.Records != 0 {
		t.Errorf("missing info = %+v", m)
	}
}

func mustCreate(t *testing.T, adm *kadm.Client, topic string, partitions int32, cfg map[string]string) {
	t.Helper()
	ptrs := map[string]*string{}
	for k, v := range cfg {
		ptrs[k] = kadm.StringPtr(v)
	}
	if _, err := adm.CreateTopic(testContext(t), partitions, -1, ptrs, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}
