package pipelines

import (
	"cmp"
	"slices"

	"github.com/sluicehq/sluice/topics"
)

// Spec declares one pipeline: what it consumes and produces, what it needs
// and how its services are built. Each pipeline package declares its Spec
// once (declare.go); the registry (package pipelines/registry) lists them
// for sluice run, sluice demo and the CLI's help. Topics are catalog names
// (package topics) and groups bare names: Naming prefixes both at run time.
// A Spec is a value; Naming.Apply returns a renamed copy.
type Spec struct {
	// Name is what sluice run takes (unique among pipelines).
	Name string
	// Doc is one line for listings.
	Doc string
	// Needs are the resources of Env the pipeline uses; the CLI connects
	// only to those.
	Needs Needs
	// Consumers are the pipeline's consumer groups, one per runner.
	Consumers []Consumer
	// Stores are compacted state topics the pipeline reads and writes
	// (e.g. ticks' job states).
	Stores []string
	// Outputs are the topics the pipeline produces that none of its
	// consumers reads, dead letters aside (its results).
	Outputs []string
	// Build builds the services on env from s, the Spec with the run's
	// Naming applied. What they hold (Kafka clients, derived Redis
	// clients) is registered on r, which releases it; Build closes nothing
	// itself. Call it through Build or Construct.
	Build func(env Env, s Spec, r *Resources) ([]Service, error)
}

// Consumer is one consumer group of a pipeline: Input → Decoder → Stage →
// Sink, failures to DLQ.
type Consumer struct {
	// Group is the consumer group (before the group prefix).
	Group string
	// Input is the topic it consumes.
	Input string
	// Decoder, Stage and Sink say what turns a record into the stage's
	// input, what the stage does (its name is the dlq.stage of its dead
	// letters) and where its outputs go.
	Decoder, Stage, Sink string
	// DLQ is the topic of its dead letters.
	DLQ string
}

// Needs names the shared resources of Env a pipeline uses.
type Needs struct {
	DB, Redis, Objects bool
}

// NeedsOf is what the pipelines of specs need together.
func NeedsOf(specs []Spec) Needs {
	var n Needs
	for _, s := range specs {
		n.DB = n.DB || s.Needs.DB
		n.Redis = n.Redis || s.Needs.Redis
		n.Objects = n.Objects || s.Needs.Objects
	}
	return n
}

// Topics returns every topic s declares (inputs, stores, dead letters,
// outputs), each once, in catalog order; topics missing from the catalog
// come last in declaration order.
func (s Spec) Topics() []string {
	var all []string
	add := func(ts ...string) {
		for _, t := range ts {
			if t != "" && !slices.Contains(all, t) {
				all = append(all, t)
			}
		}
	}
	for _, c := range s.Consumers {
		add(c.Input)
	}
	add(s.Stores...)
	for _, c := range s.Consumers {
		add(c.DLQ)
	}
	add(s.Outputs...)
	catalog := topics.Names(topics.Catalog())
	rank := func(t string) int {
		if i := slices.Index(catalog, t); i >= 0 {
			return i
		}
		return len(catalog)
	}
	slices.SortStableFunc(all, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	return all
}

// Groups returns the consumer groups of s in declaration order.
func (s Spec) Groups() []string {
	out := make([]string, len(s.Consumers))
	for i, c := range s.Consumers {
		out[i] = c.Group
	}
	return out
}

// Naming is how one run names groups and topics: the declared names with
// a prefix each (sluice run --group-prefix and --topic-prefix, to run an
// isolated copy next to another on one cluster). The zero value keeps the
// declared names.
type Naming struct {
	GroupPrefix, TopicPrefix string
}

// Group is the name of the declared group g in this run.
func (n Naming) Group(g string) string { return n.GroupPrefix + g }

// Topic is the name of the catalog topic t in this run, the name sluice
// topics ensure --prefix created it with.
func (n Naming) Topic(t string) string { return n.TopicPrefix + t }

// Apply returns s with every group and topic renamed (empty names stay
// empty); s is not modified.
func (n Naming) Apply(s Spec) Spec {
	topic := func(t string) string {
		if t == "" {
			return ""
		}
		return n.Topic(t)
	}
	all := func(ts []string) []string {
		out := make([]string, len(ts))
		for i, t := range ts {
			out[i] = topic(t)
		}
		return out
	}
	s.Consumers = slices.Clone(s.Consumers)
	for i, c := range s.Consumers {
		c.Group, c.Input, c.DLQ = n.Group(c.Group), topic(c.Input), topic(c.DLQ)
		s.Consumers[i] = c
	}
	s.Stores, s.Outputs = all(s.Stores), all(s.Outputs)
	return s
}

// Renames maps every group and topic name of declared to its name in
// renamed (the same Spec with a run's Naming applied); a name declared does
// not hold maps to itself. A pipeline whose Config has several groups names
// them with it.
func Renames(declared, renamed Spec) func(string) string {
	m := map[string]string{}
	for i, c := range declared.Consumers {
		rc := renamed.Consumers[i]
		m[c.Group], m[c.Input], m[c.DLQ] = rc.Group, rc.Input, rc.DLQ
	}
	for i, st := range declared.Stores {
		m[st] = renamed.Stores[i]
	}
	for i, o := range declared.Outputs {
		m[o] = renamed.Outputs[i]
	}
	return func(n string) string {
		if v, ok := m[n]; ok {
			return v
		}
		return n
	}
}

// AssignNames sets each string a key of names points to (a group or topic
// field of a pipeline's Config) to its value, the name from the pipeline's
// Spec; with keep, only the fields that are still empty.
func AssignNames(keep bool, names map[*string]string) {
	for f, v := range names {
		if !keep || *f == "" {
			*f = v
		}
	}
}
