package pipelines_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/topics"
)

// fakeService returns from Run at once.
type fakeService struct{ name string }

func (f fakeService) Name() string                { return f.name }
func (f fakeService) Run(_ context.Context) error { return nil }
func (f fakeService) Ready() bool                 { return true }

// releases records the order in which releases ran.
type releases struct {
	mu  sync.Mutex
	got []string
}

func (r *releases) add(res *pipelines.Resources, name string) {
	res.Add(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, name)
	})
}

func (r *releases) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// What the services of a pipeline hold is released once, last registered
// first, when the last of them returns from Run — not before, and not
// again at Close.
func TestConstructReleasesAfterEveryServiceReturned(t *testing.T) {
	t.Parallel()
	var rel releases
	svcs, res, err := pipelines.Construct(func(r *pipelines.Resources) ([]pipelines.Service, error) {
		rel.add(r, "producer")
		rel.add(r, "state client")
		return []pipelines.Service{fakeService{"a"}, fakeService{"b"}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 || svcs[0].Name() != "a" || svcs[1].Name() != "b" {
		t.Fatalf("services %v", svcs)
	}
	if err := svcs[0].Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rel.list(); len(got) != 0 {
		t.Fatalf("released %v while service b has not run", got)
	}
	if err := svcs[1].Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	res.Close()
	if got, want := rel.list(), []string{"state client", "producer"}; !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
}

// ConstructServices hands env and cfg to build, binds the services to
// their Resources like Construct (released when the last one returned from
// Run) and releases them at once when build fails.
func TestConstructServicesPassesEnvAndConfig(t *testing.T) {
	t.Parallel()
	type config struct{ name string }
	var rel releases
	env := pipelines.Env{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	build := func(got pipelines.Env, cfg config, r *pipelines.Resources) ([]pipelines.Service, error) {
		if got.Logger != env.Logger {
			t.Errorf("build got the logger %p, want the caller's %p", got.Logger, env.Logger)
		}
		rel.add(r, cfg.name)
		if cfg.name == "bad" {
			return nil, errors.New("bad config")
		}
		return []pipelines.Service{fakeService{cfg.name}}, nil
	}
	svcs, err := pipelines.ConstructServices(env, config{"worker"}, build)
	if err != nil || len(svcs) != 1 || svcs[0].Name() != "worker" {
		t.Fatalf("ConstructServices = %v, %v; want the worker service", svcs, err)
	}
	if got := rel.list(); len(got) != 0 {
		t.Fatalf("released %v before the service ran", got)
	}
	if err := svcs[0].Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rel.list(); !slices.Equal(got, []string{"worker"}) {
		t.Fatalf("released %v after the only service returned, want [worker]", got)
	}
	if svcs, err := pipelines.ConstructServices(env, config{"bad"}, build); err == nil || err.Error() != "bad config" || svcs != nil {
		t.Fatalf("ConstructServices = %v, %v; want the build error", svcs, err)
	}
	if got := rel.list(); !slices.Equal(got, []string{"worker", "bad"}) {
		t.Fatalf("released %v, want [worker bad] after the failed build", got)
	}
}

// A constructor that fails or panics part-way releases what it had
// registered; a panic goes on.
func TestConstructReleasesWhenBuildFails(t *testing.T) {
	t.Parallel()
	var rel releases
	svcs, res, err := pipelines.Construct(func(r *pipelines.Resources) ([]pipelines.Service, error) {
		rel.add(r, "producer")
		return nil, errors.New("metrics refused")
	})
	if err == nil || err.Error() != "metrics refused" || svcs != nil || res != nil {
		t.Fatalf("Construct = %v, %v, %v", svcs, res, err)
	}
	if got := rel.list(); !slices.Equal(got, []string{"producer"}) {
		t.Fatalf("released %v after a failed build", got)
	}

	var relp releases
	func() {
		defer func() {
			if p := recover(); p != "route conflicts" {
				t.Errorf("panic %v, want route conflicts", p)
			}
		}()
		_, _, _ = pipelines.Construct(func(r *pipelines.Resources) ([]pipelines.Service, error) {
			relp.add(r, "producer")
			panic("route conflicts")
		})
	}()
	if got := relp.list(); !slices.Equal(got, []string{"producer"}) {
		t.Fatalf("released %v after a panicking build", got)
	}
}

// A release registered after the Resources were released runs at once.
func TestResourcesAddAfterClose(t *testing.T) {
	t.Parallel()
	var rel releases
	var r pipelines.Resources
	r.Close()
	rel.add(&r, "late")
	r.Close()
	if got := rel.list(); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("released %v", got)
	}
}

// spec declares a test pipeline whose Build registers a release and
// records the spec it was given.
func spec(name string, rel *releases, fail error, got *pipelines.Spec) pipelines.Spec {
	return pipelines.Spec{
		Name:      name,
		Consumers: []pipelines.Consumer{{Group: name, Input: topics.BronzeRecords, DLQ: topics.BronzeDLQ}, {Group: name + "-2", Input: topics.ControlFlags}},
		Stores:    []string{topics.IngestJobs},
		Outputs:   []string{topics.SmapJobCompleted},
		Build: func(_ pipelines.Env, s pipelines.Spec, r *pipelines.Resources) ([]pipelines.Service, error) {
			if got != nil {
				*got = s
			}
			rel.add(r, name)
			if fail != nil {
				return nil, fail
			}
			return []pipelines.Service{fakeService{name}}, nil
		},
	}
}

// When one pipeline fails to build, the ones built before it are released
// too (they will never run), and the error names the pipeline.
func TestBuildReleasesEarlierPipelinesWhenOneFails(t *testing.T) {
	t.Parallel()
	var rel releases
	set, err := pipelines.Build(pipelines.Env{}, pipelines.Naming{}, []pipelines.Spec{
		spec("first", &rel, nil, nil), spec("second", &rel, nil, nil), spec("third", &rel, errors.New("needs PostgreSQL"), nil),
	})
	if set != nil || err == nil || err.Error() != "pipeline third: needs PostgreSQL" {
		t.Fatalf("Build = %v, %v", set, err)
	}
	if got, want := rel.list(), []string{"third", "second", "first"}; !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
}

// Set.Close releases the pipelines whose services never ran, and only
// those: a pipeline whose services returned released itself.
func TestSetClose(t *testing.T) {
	t.Parallel()
	var rel releases
	set, err := pipelines.Build(pipelines.Env{}, pipelines.Naming{}, []pipelines.Spec{spec("ran", &rel, nil, nil), spec("idle", &rel, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Services) != 2 {
		t.Fatalf("services %v", set.Services)
	}
	if err := set.Services[0].Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rel.list(); !slices.Equal(got, []string{"ran"}) {
		t.Fatalf("released %v after the first pipeline's service returned", got)
	}
	set.Close()
	set.Close()
	if got, want := rel.list(), []string{"ran", "idle"}; !slices.Equal(got, want) {
		t.Fatalf("released %v, want %v", got, want)
	}
}

// Build gives each pipeline its declaration with the run's prefixes on
// every group and topic; the declaration itself is not changed.
func TestBuildAppliesNaming(t *testing.T) {
	t.Parallel()
	var rel releases
	var got pipelines.Spec
	decl := spec("p", &rel, nil, &got)
	decl.Consumers[1].DLQ = ""
	set, err := pipelines.Build(pipelines.Env{}, pipelines.Naming{GroupPrefix: "g-", TopicPrefix: "t."}, []pipelines.Spec{decl})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	want := fmt.Sprint([]pipelines.Consumer{
		{Group: "g-p", Input: "t." + topics.BronzeRecords, DLQ: "t." + topics.BronzeDLQ},
		{Group: "g-p-2", Input: "t." + topics.ControlFlags},
	}, []string{"t." + topics.IngestJobs}, []string{"t." + topics.SmapJobCompleted})
	if g := fmt.Sprint(got.Consumers, got.Stores, got.Outputs); g != want {
		t.Fatalf("Build got %s\nwant %s", g, want)
	}
	if decl.Consumers[0].Group != "p" || decl.Consumers[0].Input != topics.BronzeRecords || decl.Stores[0] != topics.IngestJobs {
		t.Fatalf("the declaration changed: %+v", decl)
	}
}

// Topics lists each declared topic once, in catalog order, with topics
// outside the catalog last.
func TestSpecTopics(t *testing.T) {
	t.Parallel()
	s := pipelines.Spec{
		Consumers: []pipelines.Consumer{
			{Input: topics.SmapAnalysisFinished, DLQ: topics.SmapAnalyticsErrors},
			{Input: topics.SmapProjectCreated, DLQ: topics.SmapAnalyticsErrors},
		},
		Outputs: []string{"custom.out", topics.SmapJobCompleted, topics.SmapDataCollected},
	}
	got := strings.Join(s.Topics(), ",")
	want := strings.Join([]string{topics.SmapProjectCreated, topics.SmapDataCollected, topics.SmapAnalysisFinished,
		topics.SmapJobCompleted, topics.SmapAnalyticsErrors, "custom.out"}, ",")
	if got != want {
		t.Fatalf("Topics() = %s, want %s", got, want)
	}
}

func TestNeedsOf(t *testing.T) {
	t.Parallel()
	got := pipelines.NeedsOf([]pipelines.Spec{{Needs: pipelines.Needs{DB: true}}, {Needs: pipelines.Needs{Objects: true}}})
	if got != (pipelines.Needs{DB: true, Objects: true}) {
		t.Fatalf("NeedsOf = %+v", got)
	}
}

// AssignNames replaces every name, or with keep only the empty ones.
func TestAssignNames(t *testing.T) {
	t.Parallel()
	group, topic := "", "mine"
	pipelines.AssignNames(true, map[*string]string{&group: "declared-group", &topic: "declared-topic"})
	if group != "declared-group" || topic != "mine" {
		t.Fatalf("keep: group %q topic %q", group, topic)
	}
	pipelines.AssignNames(false, map[*string]string{&group: "g2", &topic: "t2"})
	if group != "g2" || topic != "t2" {
		t.Fatalf("replace: group %q topic %q", group, topic)
	}
}
