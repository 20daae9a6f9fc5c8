package ticks

import (
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// Name is the pipeline's name (sluice run ticks).
const Name = "ticks"

// StageName is the segment stage (dlq.stage of its dead letters).
const StageName = "ticks/segment"

// Declare declares the ticks pipeline. Its services are built with cfg,
// whose group and topics are replaced by the declared ones.
func Declare(cfg Config) pipelines.Spec {
	return pipelines.Spec{
		Name:  Name,
		Doc:   "fetches tick sessions segment by segment through the Redis rate limiter into Parquet files in the object store; job states; supervisor",
		Needs: pipelines.Needs{Redis: true, Objects: true},
		Consumers: []pipelines.Consumer{{
			Group:   Name,
			Input:   topics.IngestTasks,
			Decoder: "decodeTaskIn: a trigger, stall or bootstrap command, or a segment task",
			Stage:   StageName + ": a rate-limited fetch of one segment into a Parquet file in the object store",
			Sink:    "the chained task, in the task's partition (the job state is the runtime's state store, changelog ingest.jobs)",
			DLQ:     topics.IngestDLQ,
		}},
		// Job states: the changelog of the runtime's state store,
		// co-partitioned with the tasks; restored on assignment.
		Stores: []string{topics.IngestJobs},
		Build: func(env pipelines.Env, s pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
			return services(env, cfg.named(s, false), r)
		},
	}
}

// named sets the group and topics of c from s, ticks' declaration (with a
// run's Naming applied); with keep, only those c leaves empty.
func (c Config) named(s pipelines.Spec, keep bool) Config {
	in := s.Consumers[0]
	pipelines.AssignNames(keep, map[*string]string{
		&c.Group: in.Group, &c.TasksTopic: in.Input, &c.DLQTopic: in.DLQ, &c.JobsTopic: s.Stores[0],
	})
	return c
}
