package smap

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// names lists c's groups and topics.
func names(c Config) string {
	return fmt.Sprintf("%q", []string{c.CollectorGroup, c.AnalyticsGroup, c.ProgressGroup, c.ProjectCreatedTopic, c.DataCollectedTopic,
		c.AnalysisFinishedTopic, c.JobCompletedTopic, c.AnalyticsErrorsTopic})
}

// The services of a run are built with the declared groups and topics
// under the run's prefixes, whatever the settings said; a Config used
// directly keeps the names it sets and takes the declared ones for the
// others.
func TestDeclaredNames(t *testing.T) {
	t.Parallel()
	s := pipelines.Naming{GroupPrefix: "g-", TopicPrefix: "t."}.Apply(Declare(Config{}))
	got := names(Config{CollectorGroup: "other", JobCompletedTopic: "other"}.named(s, false))
	want := names(Config{
		CollectorGroup: "g-" + CollectorName, AnalyticsGroup: "g-" + AnalyticsName, ProgressGroup: "g-" + ProgressName,
		ProjectCreatedTopic: "t." + topics.SmapProjectCreated, DataCollectedTopic: "t." + topics.SmapDataCollected,
		AnalysisFinishedTopic: "t." + topics.SmapAnalysisFinished, JobCompletedTopic: "t." + topics.SmapJobCompleted,
		AnalyticsErrorsTopic: "t." + topics.SmapAnalyticsErrors,
	})
	if got != want {
		t.Errorf("run names %s\nwant %s", got, want)
	}
	got = names(Config{DataCollectedTopic: "mine"}.withDefaults())
	want = names(Config{
		CollectorGroup: CollectorName, AnalyticsGroup: AnalyticsName, ProgressGroup: ProgressName,
		ProjectCreatedTopic: topics.SmapProjectCreated, DataCollectedTopic: "mine",
		AnalysisFinishedTopic: topics.SmapAnalysisFinished, JobCompletedTopic: topics.SmapJobCompleted,
		AnalyticsErrorsTopic: topics.SmapAnalyticsErrors,
	})
	if got != want {
		t.Errorf("defaults %s\nwant %s", got, want)
	}
}
