package smap

import (
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run smap).
const Name = "smap"

// Declare declares the smap pipeline: three consumer groups, each named
// after its service, sharing one DLQ. Its services are built with cfg,
// whose groups and topics are replaced by the declared ones.
func Declare(cfg Config) pipelines.Spec {
	return pipelines.Spec{
		Name:  Name,
		Doc:   "crawls a project's targets into the object store, analyses each item into post_analytics and counts the project to completion",
		Needs: pipelines.Needs{DB: true, Redis: true, Objects: true},
		Consumers: []pipelines.Consumer{{
			Group:   CollectorName,
			Input:   topics.SmapProjectCreated,
			Decoder: "decodeProjectCreated: a project.created event",
			Stage:   CollectorName + ": crawl the targets, each raw item into the object store and its crawl journal; seal the project's total",
			Sink:    "a data.collected event per item, committed with the project.created offset (the stage publishes the completion of an empty project)",
			DLQ:     topics.SmapAnalyticsErrors,
		}, {
			Group:   AnalyticsName,
			Input:   topics.SmapDataCollected,
			Decoder: "decodeCollected: a data.collected event",
			Stage:   AnalyticsName + ": read the raw item, run the analyzers",
			Sink:    "post_analytics upsert, then an analysis.finished event per item",
			DLQ:     topics.SmapAnalyticsErrors,
		}, {
			Group:   ProgressName,
			Input:   topics.SmapAnalysisFinished,
			Decoder: "decodeFinished: an analysis.finished event",
			Stage:   ProgressName + ": count each item once in the project's Redis progress",
			Sink:    "a job.completed event once the count reaches the sealed total",
			DLQ:     topics.SmapAnalyticsErrors,
		}},
		Outputs: []string{topics.SmapJobCompleted},
		Build: func(env pipelines.Env, s pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
			return services(env, cfg.named(s, false), r)
		},
	}
}

// named sets the groups and topics of c from s, smap's declaration (with a
// run's Naming applied); with keep, only those c leaves empty.
func (c Config) named(s pipelines.Spec, keep bool) Config {
	col, ana, prg := s.Consumers[0], s.Consumers[1], s.Consumers[2]
	pipelines.AssignNames(keep, map[*string]string{
		&c.CollectorGroup: col.Group, &c.AnalyticsGroup: ana.Group, &c.ProgressGroup: prg.Group,
		&c.ProjectCreatedTopic: col.Input, &c.DataCollectedTopic: ana.Input, &c.AnalysisFinishedTopic: prg.Input,
		&c.AnalyticsErrorsTopic: col.DLQ, &c.JobCompletedTopic: s.Outputs[0],
	})
	return c
}
