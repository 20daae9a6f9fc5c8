package ticks

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
	c := Config{Group: "other", JobsTopic: "other"}.named(s, false)
	if c.Group != "g-"+Name || c.TasksTopic != "t."+topics.IngestTasks || c.JobsTopic != "t."+topics.IngestJobs || c.DLQTopic != "t."+topics.IngestDLQ {
		t.Errorf("run names: group %q topics %q %q %q", c.Group, c.TasksTopic, c.JobsTopic, c.DLQTopic)
	}
	d := Config{TasksTopic: "mine"}.withDefaults()
	if d.Group != Name || d.TasksTopic != "mine" || d.JobsTopic != topics.IngestJobs || d.DLQTopic != topics.IngestDLQ {
		t.Errorf("defaults: group %q topics %q %q %q", d.Group, d.TasksTopic, d.JobsTopic, d.DLQTopic)
	}
	if d.Runtime.Group != d.Group || len(d.Runtime.Topics) != 1 || d.Runtime.Topics[0] != "mine" || d.Runtime.DLQTopic != topics.IngestDLQ {
		t.Errorf("runtime config: group %q topics %v DLQ %q", d.Runtime.Group, d.Runtime.Topics, d.Runtime.DLQTopic)
	}
}
