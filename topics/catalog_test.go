package topics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/topics"
)

func TestCatalogCoversDesign(t *testing.T) {
	t.Parallel()
	want := map[string]string{ // docs/topics.md: name → cleanup policy
		"bronze.records": "delete", "bronze.dlq": "delete", "control.flags": "compact",
		"ingest.tasks": "delete", "ingest.jobs": "compact", "ingest.dlq": "delete",
		"smap.project.created": "delete", "smap.data.collected": "delete", "smap.analysis.finished": "delete",
		"smap.job.completed": "delete", "smap.analytics.errors": "delete",
		"trades.import": "delete", "trades.events": "delete", "trades.bias": "delete", "coach.reflect": "delete",
		"digest.ready": "delete", "trades.dlq": "delete",
		"trades.import.state": "compact", "trades.digest.state": "compact",
		"modules.refresh": "delete", "modules.state": "compact", "modules.dlq": "delete",
	}
	cat := topics.Catalog()
	if len(cat) != len(want) {
		t.Errorf("catalog has %d topics, want %d", len(cat), len(want))
	}
	for _, s := range cat {
		policy, ok := want[s.Name]
		if !ok {
			t.Errorf("unexpected topic %q", s.Name)
			continue
		}
		if s.Cleanup != policy {
			t.Errorf("%s: cleanup %q, want %q", s.Name, s.Cleanup, policy)
		}
		if s.Key == "" || s.Doc == "" {
			t.Errorf("%s: key and doc must be documented", s.Name)
		}
		if s.Cleanup == topics.CleanupCompact {
			if s.Configs[topics.ConfigMinCleanableDirtyRatio] == "" || s.Configs[topics.ConfigSegmentMs] == "" {
				t.Errorf("%s: compacted topic without compaction tuning: %v", s.Name, s.Configs)
			}
			if s.Retention != topics.BrokerDefault {
				t.Errorf("%s: compacted topic with retention %v", s.Name, s.Retention)
			}
		}
		if strings.HasSuffix(s.Name, "dlq") || s.Name == topics.SmapAnalyticsErrors {
			if s.Retention <= topics.DataRetention {
				t.Errorf("%s: DLQ retention %v not longer than data retention %v", s.Name, s.Retention, topics.DataRetention)
			}
		}
	}
	if err := topics.Validate(cat); err != nil {
		t.Errorf("catalog does not validate: %v", err)
	}
	byName := map[string]topics.Spec{}
	for _, s := range cat {
		byName[s.Name] = s
	}
	if got := byName[topics.IngestJobs].CoPartitionedWith; got != topics.IngestTasks {
		t.Errorf("ingest.jobs co-partitioned with %q, want ingest.tasks", got)
	}
	if byName[topics.BronzeRecords].Partitions != 6 {
		t.Errorf("bronze.records partitions = %d, want 6", byName[topics.BronzeRecords].Partitions)
	}
}

func TestCatalogIsFresh(t *testing.T) {
	t.Parallel()
	a := topics.Catalog()
	a[0].Name = "mutated"
	for i := range a {
		if a[i].Configs != nil {
			a[i].Configs["x"] = "y"
		}
	}
	for _, s := range topics.Catalog() {
		if s.Name == "mutated" || s.Configs["x"] != "" {
			t.Fatalf("Catalog shares state between calls: %+v", s)
		}
	}
}

func TestSelect(t *testing.T) {
	t.Parallel()
	cat := topics.Catalog()
	got, err := topics.Select(cat,
		topics.WithPrefix("p1."),
		topics.WithPartitions(topics.IngestTasks, 12),
		topics.WithPartitions(topics.BronzeRecords, 2),
		topics.WithReplicationFactor(3))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]topics.Spec{}
	for _, s := range got {
		if !strings.HasPrefix(s.Name, "p1.") {
			t.Errorf("%s: prefix missing", s.Name)
		}
		if s.ReplicationFactor != 3 {
			t.Errorf("%s: rf %d, want 3", s.Name, s.ReplicationFactor)
		}
		m[s.Name] = s
	}
	if p := m["p1.ingest.tasks"].Partitions; p != 12 {
		t.Errorf("ingest.tasks partitions %d, want 12", p)
	}
	if p := m["p1.ingest.jobs"].Partitions; p != 12 {
		t.Errorf("ingest.jobs (co-partitioned) partitions %d, want 12", p)
	}
	if c := m["p1.ingest.jobs"].CoPartitionedWith; c != "p1.ingest.tasks" {
		t.Errorf("co-partition reference %q not prefixed", c)
	}
	if p := m["p1.bronze.records"].Partitions; p != 2 {
		t.Errorf("bronze.records partitions %d, want 2", p)
	}
	// Overriding the other side of the pair moves both too.
	got, err = topics.Select(cat, topics.WithPartitions(topics.IngestJobs, 4))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if (s.Name == topics.IngestJobs || s.Name == topics.IngestTasks) && s.Partitions != 4 {
			t.Errorf("%s partitions %d, want 4", s.Name, s.Partitions)
		}
	}
	if cat[0].Name != topics.BronzeRecords || cat[0].Partitions != 6 {
		t.Errorf("Select modified its input: %+v", cat[0])
	}
	if _, err := topics.Select(cat, topics.WithPartitions("no.such.topic", 3)); err == nil || !strings.Contains(err.Error(), "no.such.topic") {
		t.Errorf("unknown override: err = %v", err)
	}
	if _, err := topics.Select(cat, topics.WithPartitions(topics.BronzeRecords, 0)); err == nil || !strings.Contains(err.Error(), "partitions 0") {
		t.Errorf("zero partitions: err = %v", err)
	}
	// Overrides that give one topic two counts, through its co-partitioned
	// group, conflict; the error names the overridden topic and both
	// overrides. Overrides that agree do not.
	_, err = topics.Select(cat, topics.WithPartitions(topics.IngestTasks, 4), topics.WithPartitions(topics.IngestJobs, 8))
	ce, ok := errors.AsType[*topics.ConflictError](err)
	if !ok || ce.Topic != topics.IngestJobs || ce.First != (topics.Override{Name: topics.IngestTasks, Partitions: 4}) || ce.Second != (topics.Override{Name: topics.IngestJobs, Partitions: 8}) {
		t.Errorf("conflicting overrides: err = %v (%+v)", err, ce)
	}
	if _, err := topics.Select(cat, topics.WithPartitions(topics.IngestTasks, 4), topics.WithPartitions(topics.IngestJobs, 4)); err != nil {
		t.Errorf("agreeing overrides: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := topics.Spec{Name: "a.b", Partitions: 3, ReplicationFactor: -1, Cleanup: topics.CleanupDelete}
	with := func(f func(*topics.Spec)) []topics.Spec {
		s := ok
		f(&s)
		return []topics.Spec{s}
	}
	tests := []struct {
		name  string
		specs []topics.Spec
		want  string // substring of the error; "" = valid
	}{
		{"valid", []topics.Spec{ok}, ""},
		{"infinite retention", with(func(s *topics.Spec) { s.Retention = topics.Infinite }), ""},
		{"empty name", with(func(s *topics.Spec) { s.Name = "" }), "illegal name"},
		{"slash in name", with(func(s *topics.Spec) { s.Name = "a/b" }), "illegal name"},
		{"dot name", with(func(s *topics.Spec) { s.Name = ".." }), "illegal name"},
		{"long name", with(func(s *topics.Spec) { s.Name = strings.Repeat("a", 250) }), "illegal name"},
		{"duplicate", []topics.Spec{ok, ok}, "listed twice"},
		{"dot underscore collision", []topics.Spec{ok, func() topics.Spec { s := ok; s.Name = "a_b"; return s }()}, "collides"},
		{"no partitions", with(func(s *topics.Spec) { s.Partitions = 0 }), "partitions 0"},
		{"rf zero", with(func(s *topics.Spec) { s.ReplicationFactor = 0 }), "replication factor 0"},
		{"unknown policy", with(func(s *topics.Spec) { s.Cleanup = "compact,delete" }), "unknown cleanup policy"},
		{"empty policy", with(func(s *topics.Spec) { s.Cleanup = "" }), "unknown cleanup policy"},
		{"negative retention", with(func(s *topics.Spec) { s.Retention = -2 }), "retention"},
		{"sub-ms retention", with(func(s *topics.Spec) { s.Retention = time.Microsecond }), "retention"},
		{"shadowed policy", with(func(s *topics.Spec) { s.Configs = map[string]string{"cleanup.policy": "compact"} }), "cleanup.policy must be set"},
		{"shadowed retention", with(func(s *topics.Spec) { s.Configs = map[string]string{"retention.ms": "1"} }), "retention.ms must be set"},
		{"dangling co-partition", with(func(s *topics.Spec) { s.CoPartitionedWith = "x" }), `co-partitioned with "x", which is not selected`},
		{"unequal co-partition", []topics.Spec{ok, {Name: "c", Partitions: 4, ReplicationFactor: -1, Cleanup: "compact", CoPartitionedWith: "a.b"}}, "4 partitions but co-partitioned"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := topics.Validate(tc.specs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestTopicConfigs(t *testing.T) {
	t.Parallel()
	s := topics.Spec{Name: "x", Partitions: 1, ReplicationFactor: -1, Cleanup: topics.CleanupDelete, Retention: 36 * time.Hour,
		Configs: map[string]string{"segment.ms": "1000"}}
	got := s.TopicConfigs()
	want := map[string]string{"cleanup.policy": "delete", "retention.ms": "129600000", "segment.ms": "1000"}
	if len(got) != len(want) {
		t.Fatalf("TopicConfigs = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	s.Retention = topics.Infinite
	if v := s.TopicConfigs()["retention.ms"]; v != "-1" {
		t.Errorf("infinite retention.ms = %q, want -1", v)
	}
	s.Retention = topics.BrokerDefault
	if _, ok := s.TopicConfigs()["retention.ms"]; ok {
		t.Errorf("broker-default retention must leave retention.ms unmanaged")
	}
}
