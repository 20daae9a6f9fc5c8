package silver

import (
	"testing"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// The services of a run are built with the declared group and topics
// under the run's prefixes, whatever the settings said; a Config used
// directly keeps the names it sets and takes the declared ones for the
// others.
func TestDeclaredNames(t *testing.T) {
	t.Parallel()
	s := pipelines.Naming{GroupPrefix: "g-", TopicPrefix: "t."}.Apply(Declare(Config{}))
	c := Config{Group: "other", Topic: "other"}.named(s, false)
	if c.Group != "g-"+Name || c.Topic != "t."+topics.BronzeRecords || c.DLQTopic != "t."+topics.BronzeDLQ || c.FlagsTopic != "t."+topics.ControlFlags {
		t.Errorf("run names: group %q topics %q %q %q", c.Group, c.Topic, c.DLQTopic, c.FlagsTopic)
	}
	d, err := Config{Topic: "mine"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d.Group != Name || d.Topic != "mine" || d.DLQTopic != topics.BronzeDLQ || d.FlagsTopic != topics.ControlFlags {
		t.Errorf("defaults: group %q topics %q %q %q", d.Group, d.Topic, d.DLQTopic, d.FlagsTopic)
	}
	if d.Runtime.Group != d.Group || len(d.Runtime.Topics) != 1 || d.Runtime.Topics[0] != "mine" || d.Runtime.DLQTopic != topics.BronzeDLQ {
		t.Errorf("runtime config: group %q topics %v DLQ %q", d.Runtime.Group, d.Runtime.Topics, d.Runtime.DLQTopic)
	}
}
