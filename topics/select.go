package topics

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Option adjusts the specs returned by Select.
type Option func(*selection)

type selection struct {
	prefix     string
	rf         *int16
	partitions []Override
}

// WithPartitions sets the partition count of the catalog topic name (the name
// without prefix) and of every topic co-partitioned with it, so that
// co-partitioned pairs stay equal. Two WithPartitions that give one topic
// different counts, directly or through its group, make Select fail with a
// *ConflictError.
func WithPartitions(name string, n int32) Option {
	return func(s *selection) { s.partitions = append(s.partitions, Override{name, n}) }
}

// WithReplicationFactor sets the replication factor of every topic (-1 for
// the broker default).
func WithReplicationFactor(n int16) Option {
	return func(s *selection) { s.rf = &n }
}

// WithPrefix prepends p to every topic name, including CoPartitionedWith
// references. Tests use a unique prefix to isolate themselves on a shared
// broker.
func WithPrefix(p string) Option {
	return func(s *selection) { s.prefix = p }
}

// ConflictError is Select's error for two partition overrides that give
// Topic different counts: First (the earlier option) and Second, each as
// the topic it named and its count.
type ConflictError struct {
	Topic         string
	First, Second Override
}

// Override is one WithPartitions option: a catalog topic and its count.
type Override struct {
	Name       string
	Partitions int32
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("contradictory partition overrides for topic %s: %d (%s=%d) and %d (%s=%d)",
		e.Topic, e.First.Partitions, e.First.Name, e.First.Partitions, e.Second.Partitions, e.Second.Name, e.Second.Partitions)
}

// Select returns a copy of specs with opts applied, validated with Validate.
// specs is not modified. Partition overrides name topics without the prefix;
// an override of a topic that is not in specs is an error, and so are
// overrides that contradict each other (*ConflictError).
func Select(specs []Spec, opts ...Option) ([]Spec, error) {
	var sel selection
	for _, o := range opts {
		o(&sel)
	}
	out := make([]Spec, len(specs))
	index := make(map[string]int, len(specs))
	for i, s := range specs {
		out[i] = s.clone()
		index[s.Name] = i
	}
	setBy := map[string]Override{} // topic → the override that set its count
	for _, po := range sel.partitions {
		i, ok := index[po.Name]
		if !ok {
			return nil, fmt.Errorf("partition override for unknown topic %q", po.Name)
		}
		// Set the whole co-partitioned group (the transitive closure of
		// CoPartitionedWith in both directions).
		group := map[string]bool{out[i].Name: true}
		for grew := true; grew; {
			grew = false
			for _, s := range out {
				if s.CoPartitionedWith == "" || group[s.Name] == group[s.CoPartitionedWith] {
					continue
				}
				group[s.Name], group[s.CoPartitionedWith] = true, true
				grew = true
			}
		}
		// The named topic first, so that a conflict names it when it is
		// one of the two.
		members := []int{i}
		for j := range out {
			if j != i && group[out[j].Name] {
				members = append(members, j)
			}
		}
		for _, j := range members {
			if prev, ok := setBy[out[j].Name]; ok && prev.Partitions != po.Partitions {
				return nil, &ConflictError{Topic: out[j].Name, First: prev, Second: po}
			}
			setBy[out[j].Name] = po
			out[j].Partitions = po.Partitions
		}
	}
	for i := range out {
		if sel.rf != nil {
			out[i].ReplicationFactor = *sel.rf
		}
		if sel.prefix != "" {
			out[i].Name = sel.prefix + out[i].Name
			if out[i].CoPartitionedWith != "" {
				out[i].CoPartitionedWith = sel.prefix + out[i].CoPartitionedWith
			}
		}
	}
	if err := Validate(out); err != nil {
		return nil, err
	}
	return out, nil
}

var legalName = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// ValidName reports whether name is a legal Kafka topic name: 1 to 249
// characters from [a-zA-Z0-9._-], and not "." or "..".
func ValidName(name string) bool {
	return len(name) > 0 && len(name) <= 249 && name != "." && name != ".." && legalName.MatchString(name)
}

// Validate checks specs: legal and unique names (also after Kafka's
// '.'/'_' collision rule), at least one partition, a replication factor of -1
// or ≥ 1, a known cleanup policy, a retention of -1, 0 or at least 1 ms,
// extra configs that do not shadow Cleanup or Retention, and co-partitioned
// topics that exist in specs and have equal partition counts. It returns every
// problem found, joined.
func Validate(specs []Spec) error {
	var errs []error
	byName := make(map[string]Spec, len(specs))
	collide := make(map[string]string, len(specs))
	for _, s := range specs {
		if !ValidName(s.Name) {
			errs = append(errs, fmt.Errorf("topic %q: illegal name (1-249 characters of [a-zA-Z0-9._-])", s.Name))
		}
		if _, dup := byName[s.Name]; dup {
			errs = append(errs, fmt.Errorf("topic %q: listed twice", s.Name))
		}
		norm := strings.ReplaceAll(s.Name, ".", "_")
		if other, ok := collide[norm]; ok && other != s.Name {
			errs = append(errs, fmt.Errorf("topic %q: collides with %q ('.' and '_' are equivalent in Kafka metrics)", s.Name, other))
		}
		byName[s.Name] = s
		collide[norm] = s.Name
		if s.Partitions < 1 {
			errs = append(errs, fmt.Errorf("topic %q: partitions %d < 1", s.Name, s.Partitions))
		}
		if s.ReplicationFactor == 0 || s.ReplicationFactor < -1 {
			errs = append(errs, fmt.Errorf("topic %q: replication factor %d (want -1 or ≥ 1)", s.Name, s.ReplicationFactor))
		}
		switch s.Cleanup {
		case CleanupDelete, CleanupCompact:
		default:
			errs = append(errs, fmt.Errorf("topic %q: unknown cleanup policy %q (want %q or %q)", s.Name, s.Cleanup, CleanupDelete, CleanupCompact))
		}
		if s.Retention < Infinite || (s.Retention > 0 && s.Retention < time.Millisecond) {
			errs = append(errs, fmt.Errorf("topic %q: retention %v (want -1, 0 or ≥ 1ms)", s.Name, s.Retention))
		}
		for _, k := range []string{ConfigCleanupPolicy, ConfigRetentionMs} {
			if _, ok := s.Configs[k]; ok {
				errs = append(errs, fmt.Errorf("topic %q: config %s must be set through the spec's fields, not Configs", s.Name, k))
			}
		}
	}
	for _, s := range specs {
		if s.CoPartitionedWith == "" {
			continue
		}
		p, ok := byName[s.CoPartitionedWith]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("topic %q: co-partitioned with %q, which is not selected", s.Name, s.CoPartitionedWith))
		case p.Partitions != s.Partitions:
			errs = append(errs, fmt.Errorf("topic %q: %d partitions but co-partitioned %q has %d", s.Name, s.Partitions, p.Name, p.Partitions))
		}
	}
	return errors.Join(errs...)
}
