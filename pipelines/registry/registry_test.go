package registry_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/pipelines/registry"
	"github.com/sluicehq/sluice/topics"
)

// Every declaration is complete, every name it uses is a catalog topic
// (sluice topics ensure creates it), and no two pipelines share a name or
// a consumer group.
func TestDeclarations(t *testing.T) {
	t.Parallel()
	catalog := topics.Names(topics.Catalog())
	names := map[string]bool{}
	groups := map[string]string{}
	for _, s := range registry.All(registry.Settings{}) {
		if s.Name == "" || s.Doc == "" || s.Build == nil || len(s.Consumers) == 0 {
			t.Errorf("incomplete declaration %+v", s)
		}
		if names[s.Name] {
			t.Errorf("pipeline %s declared twice", s.Name)
		}
		names[s.Name] = true
		for _, c := range s.Consumers {
			if c.Group == "" || c.Input == "" || c.DLQ == "" || c.Decoder == "" || c.Stage == "" || c.Sink == "" {
				t.Errorf("%s: incomplete consumer %+v", s.Name, c)
			}
			if other, ok := groups[c.Group]; ok {
				t.Errorf("consumer group %s declared by %s and %s", c.Group, other, s.Name)
			}
			groups[c.Group] = s.Name
		}
		for _, topic := range s.Topics() {
			if !slices.Contains(catalog, topic) {
				t.Errorf("%s: topic %q is not in the catalog", s.Name, topic)
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("no pipelines")
	}
}
