package pipelines

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Resources is what a pipeline's services hold besides Env (Kafka clients,
// derived Redis clients) and must release: each Add registers one release,
// and all of them run once, the last registered first — when every service
// built with them has returned from Run (see Construct), or at Close for
// services that failed to build or will never run. Safe for concurrent use.
type Resources struct {
	mu       sync.Mutex
	releases []func()
	released bool
}

// Add registers release. Once r is released, Add calls release at once.
func (r *Resources) Add(release func()) {
	r.mu.Lock()
	if !r.released {
		r.releases = append(r.releases, release)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	release()
}

// Close releases r now; later calls do nothing. No service built with r
// may be running.
func (r *Resources) Close() {
	r.mu.Lock()
	rs := r.releases
	r.releases, r.released = nil, true
	r.mu.Unlock()
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i]()
	}
}

// bound is a service of Construct: the last of its services to return from
// Run releases their Resources.
type bound struct {
	Service
	r    *Resources
	left *atomic.Int32
}

func (b bound) Run(ctx context.Context) error {
	defer func() {
		if b.left.Add(-1) == 0 {
			b.r.Close()
		}
	}()
	return b.Service.Run(ctx)
}

// Construct calls build with new Resources. When build fails (or panics)
// what it registered is released and its error returned (the panic goes
// on). Otherwise it returns build's services bound to the Resources — they
// are released once every one of the services has returned from Run (each
// may run once) — and the Resources, whose Close releases them at once for
// services that will never run.
func Construct(build func(r *Resources) ([]Service, error)) ([]Service, *Resources, error) {
	r := &Resources{}
	keep := false
	defer func() {
		if !keep {
			r.Close()
		}
	}()
	ss, err := build(r)
	if err != nil {
		return nil, nil, err
	}
	left := new(atomic.Int32)
	left.Store(int32(len(ss)))
	out := make([]Service, len(ss))
	for i, s := range ss {
		out[i] = bound{Service: s, r: r, left: left}
	}
	keep = len(ss) > 0
	return out, r, nil
}

// ConstructServices is Construct for a pipeline's Services function: it
// builds the services with build(env, cfg, r) and returns them bound to
// their Resources, which are released once every service has returned
// from Run, or at once when build fails (or panics).
func ConstructServices[C any](env Env, cfg C, build func(Env, C, *Resources) ([]Service, error)) ([]Service, error) {
	svcs, _, err := Construct(func(r *Resources) ([]Service, error) {
		return build(env, cfg, r)
	})
	return svcs, err
}

// Set is the services Build built, in the order of their specs.
type Set struct {
	Services []Service
	held     []*Resources
}

// Build builds the services of specs on env in order, each spec with n
// applied. When one fails (or panics), what the earlier ones built is
// released too, and the error is prefixed "pipeline NAME: ". The caller
// runs the services and closes the Set after they all returned (or if it
// never runs them).
func Build(env Env, n Naming, specs []Spec) (*Set, error) {
	set := &Set{}
	ok := false
	defer func() {
		if !ok {
			set.Close()
		}
	}()
	for _, s := range specs {
		if s.Build == nil {
			return nil, fmt.Errorf("pipeline %s: declared without Build", s.Name)
		}
		s = n.Apply(s)
		ss, r, err := Construct(func(r *Resources) ([]Service, error) { return s.Build(env, s, r) })
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", s.Name, err)
		}
		set.Services = append(set.Services, ss...)
		set.held = append(set.held, r)
	}
	ok = true
	return set, nil
}

// Close releases what the set's services hold and did not release on
// their own (services that never ran). Later calls do nothing.
func (s *Set) Close() {
	for i := len(s.held) - 1; i >= 0; i-- {
		s.held[i].Close()
	}
}
