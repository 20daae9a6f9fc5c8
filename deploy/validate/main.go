// Command validate checks the deploy/ artefacts with the parsers the real
// tools use, without a Docker engine, a cluster or a Prometheus server:
//
//   - deploy/Dockerfile with BuildKit's Dockerfile parser and linter;
//   - deploy/compose/compose.yaml with compose-go (the loader behind
//     `docker compose config`: schema validation, interpolation,
//     normalisation), plus the properties the stack relies on;
//   - the Kubernetes manifests (kustomize output read from stdin, and the
//     files kustomization.yaml leaves out) decoded strictly into the
//     k8s.io/api types, plus selector/probe/grace-period checks;
//   - deploy/prometheus/alerts.yml with Prometheus' rule-file parser
//     (PromQL and templates) and every dashboard query with the PromQL parser.
//
// Usage (from the repository root):
//
//	kubectl kustomize deploy/k8s | (cd deploy/validate && go run . ../..)
//
// It is its own Go module so that these parsers never enter the product's
// go.mod; nothing here runs the artefacts.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	dfparser "github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

var failures int

func fail(format string, args ...any) {
	failures++
	fmt.Printf("FAIL "+format+"\n", args...)
}

func ok(format string, args ...any) { fmt.Printf("ok   "+format+"\n", args...) }

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	checkDockerfile(filepath.Join(root, "deploy/Dockerfile"))
	checkCompose(filepath.Join(root, "deploy/compose/compose.yaml"))
	rendered, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("read kustomize output: %v", err)
	}
	checkK8s("kustomize output", rendered)
	for _, f := range []string{"deploy/k8s/secret.template.yaml", "deploy/k8s/hpa.example.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			fail("%s: %v", f, err)
			continue
		}
		checkK8s(f, b)
	}
	checkRules(filepath.Join(root, "deploy/prometheus/alerts.yml"))
	checkDashboard(filepath.Join(root, "deploy/grafana/dashboards/sluice-overview.json"))
	if failures > 0 {
		fmt.Printf("\n%d failure(s)\n", failures)
		os.Exit(1)
	}
	fmt.Println("\nall validations passed")
}

// ---- Dockerfile ---------------------------------------------------------------

func checkDockerfile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("dockerfile: %v", err)
		return
	}
	res, err := dfparser.Parse(bytes.NewReader(b))
	if err != nil {
		fail("dockerfile parse: %v", err)
		return
	}
	for _, w := range res.Warnings {
		fail("dockerfile parser warning: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []dfparser.Range) {
		fail("dockerfile lint %s: %s (line %v)", rule, msg, loc)
	}})
	before := failures
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		fail("dockerfile instructions: %v", err)
		return
	}
	last := stages[len(stages)-1]
	var user, entry bool
	for _, c := range last.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User != "" && !strings.HasPrefix(c.User, "0") && c.User != "root"
		case *instructions.EntrypointCommand:
			entry = !c.PrependShell && len(c.CmdLine) == 1 && c.CmdLine[0] == "/sluice"
		}
	}
	if !user || !entry {
		fail("dockerfile: final stage needs a non-root USER (%v) and ENTRYPOINT [\"/sluice\"] (%v)", user, entry)
	}
	if failures > before {
		return
	}
	ok("dockerfile: %d stages parsed, BuildKit lint rules clean, non-root, exec-form ENTRYPOINT", len(stages))
}

// ---- compose ------------------------------------------------------------------

func checkCompose(path string) {
	ctx := context.Background()
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)), cli.WithOsEnv, cli.WithConsistency(true))
	if err != nil {
		fail("compose options: %v", err)
		return
	}
	p, err := opts.LoadProject(ctx)
	if err != nil {
		fail("compose load: %v", err)
		return
	}
	out, err := p.MarshalYAML()
	if err != nil {
		fail("compose marshal: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(os.TempDir(), "sluice-compose-config.yaml"), out, 0o644); err != nil {
		fail("compose write: %v", err)
	}
	ok("compose: loaded by compose-go (%d services), normalised config in %s", len(p.Services), filepath.Join(os.TempDir(), "sluice-compose-config.yaml"))

	want := map[string]bool{"redpanda": true, "postgres": true, "redis": true, "minio": true, "minio-init": true,
		"init": true, "silver": true, "ticks": true, "smap": true, "prometheus": true, "grafana": true}
	for name := range want {
		if _, ok := p.Services[name]; !ok {
			fail("compose: service %s missing", name)
		}
	}
	silver := p.Services["silver"]
	if silver.Deploy == nil || silver.Deploy.Replicas == nil || *silver.Deploy.Replicas != 2 {
		fail("compose: silver needs deploy.replicas 2")
	}
	for _, pt := range silver.Ports {
		if pt.Published != "" {
			fail("compose: silver publishes a fixed host port %s (replicas would collide)", pt.Published)
		}
	}
	for _, name := range []string{"silver", "ticks", "smap"} {
		s := p.Services[name]
		if s.HealthCheck == nil || !strings.Contains(strings.Join(s.HealthCheck.Test, " "), "/healthz") {
			fail("compose: %s has no /healthz healthcheck", name)
		}
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < 45*time.Second {
			fail("compose: %s stop_grace_period must cover the 20 s revoke timeout + final commit", name)
		}
		if d, ok := s.DependsOn["init"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			fail("compose: %s must wait for init to complete successfully", name)
		}
		if s.Environment["KAFKA_BROKERS"] == nil || *s.Environment["KAFKA_BROKERS"] != "redpanda:9092" {
			fail("compose: %s KAFKA_BROKERS should be redpanda:9092", name)
		}
	}
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			if d.Condition == types.ServiceConditionHealthy && p.Services[dep].HealthCheck == nil {
				fail("compose: %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
	}
	ok("compose: replicas, ports, healthchecks, grace periods and depends_on conditions as intended")
}

// ---- Kubernetes ---------------------------------------------------------------

func checkK8s(what string, data []byte) {
	docs := splitYAML(data)
	kinds := map[string]int{}
	var workloads []workload
	var pdbs []policyv1.PodDisruptionBudget
	var netpols []networkingv1.NetworkPolicy
	for i, d := range docs {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(d, &meta); err != nil {
			fail("k8s %s doc %d: %v", what, i, err)
			continue
		}
		var obj any
		switch meta.APIVersion + "/" + meta.Kind {
		case "v1/Namespace":
			obj = &corev1.Namespace{}
		case "v1/ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1/Secret":
			obj = &corev1.Secret{}
		case "v1/Service":
			obj = &corev1.Service{}
		case "apps/v1/Deployment":
			obj = &appsv1.Deployment{}
		case "apps/v1/StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "batch/v1/Job":
			obj = &batchv1.Job{}
		case "policy/v1/PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "networking.k8s.io/v1/NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		case "autoscaling/v2/HorizontalPodAutoscaler":
			obj = &autoscalingv2.HorizontalPodAutoscaler{}
		default:
			fail("k8s %s doc %d: unexpected %s %s", what, i, meta.APIVersion, meta.Kind)
			continue
		}
		if err := yaml.UnmarshalStrict(d, obj); err != nil {
			fail("k8s %s %s: strict decode: %v", what, meta.Kind, err)
			continue
		}
		kinds[meta.Kind]++
		switch o := obj.(type) {
		case *appsv1.Deployment:
			workloads = append(workloads, checkWorkload(what, workload{"Deployment/" + o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template}))
		case *appsv1.StatefulSet:
			workloads = append(workloads, checkWorkload(what, workload{"StatefulSet/" + o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template}))
			checkStaticMembers(what, "StatefulSet/"+o.Name, o.Spec.Template.Spec)
		case *batchv1.Job:
			checkPodSpec(what, "Job/"+o.Name, o.Spec.Template.Spec, false)
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, *o)
		case *networkingv1.NetworkPolicy:
			netpols = append(netpols, *o)
		case *corev1.Service:
			if len(o.Spec.Selector) == 0 {
				fail("k8s Service/%s: no selector", o.Name)
			}
		}
	}
	for _, pdb := range pdbs {
		sel, _ := metav1LabelSelector(pdb.Spec.Selector.MatchLabels)
		n := 0
		for _, w := range workloads {
			if sel.Matches(labels.Set(w.template.Labels)) {
				n++
			}
		}
		if n != 1 {
			fail("k8s PodDisruptionBudget/%s selects %d workloads", pdb.Name, n)
		}
	}
	if len(workloads) > 0 {
		checkOpsExposure(what, workloads, netpols)
	}
	ok("k8s %s: %d documents decoded strictly into k8s.io/api types %v", what, len(docs), kinds)
}

// workload is a Deployment or a StatefulSet: what the checks read of it.
type workload struct {
	name     string // Kind/name
	selector map[string]string
	template corev1.PodTemplateSpec
}

// checkWorkload checks w's pod template and that its selector matches the
// template's labels; it returns w.
func checkWorkload(what string, w workload) workload {
	checkPodSpec(what, w.name, w.template.Spec, true)
	sel, err := metav1LabelSelector(w.selector)
	if err != nil || !sel.Matches(labels.Set(w.template.Labels)) {
		fail("k8s %s: selector does not match the template labels", w.name)
	}
	return w
}

// checkStaticMembers checks that the sluice containers of a StatefulSet
// take their group instance id from the pod name: the name a StatefulSet
// keeps across restarts, which static membership relies on.
func checkStaticMembers(what, name string, spec corev1.PodSpec) {
	for _, c := range spec.Containers {
		if len(c.Args) == 0 || c.Args[0] != "run" {
			continue // not sluice run
		}
		ok := false
		for _, e := range c.Env {
			if e.Name == "KAFKA_INSTANCE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
				ok = true
			}
		}
		if !ok {
			fail("k8s %s %s/%s: KAFKA_INSTANCE_ID must be the pod name (fieldRef metadata.name)", what, name, c.Name)
		}
	}
}

// checkOpsExposure checks that the ops port of every workload is covered by
// a NetworkPolicy that admits ingress on it, and that a sluice container
// whose ops server listens beyond loopback takes SLUICE_API_TOKEN from a
// Secret (sluice refuses to start without it).
func checkOpsExposure(what string, workloads []workload, netpols []networkingv1.NetworkPolicy) {
	for _, d := range workloads {
		podLabels := labels.Set(d.template.Labels)
		covered := false
		for _, np := range netpols {
			sel, err := metav1LabelSelector(np.Spec.PodSelector.MatchLabels)
			if err != nil || !sel.Matches(podLabels) {
				continue
			}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port != nil && (p.Port.String() == "ops" || p.Port.IntValue() == 9464) {
						covered = true
					}
				}
			}
		}
		if !covered {
			fail("k8s %s %s: no NetworkPolicy selects its pods and admits the ops port", what, d.name)
		}
		for _, c := range d.template.Spec.Containers {
			if !nonLoopbackOps(c.Args) { // sluice run … --ops-addr
				continue
			}
			fromSecret := false
			for _, e := range c.Env {
				if e.Name == "SLUICE_API_TOKEN" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
					(e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional) {
					fromSecret = true
				}
			}
			if !fromSecret {
				fail("k8s %s %s/%s: the ops server listens beyond loopback but SLUICE_API_TOKEN does not come from a (required) Secret key", what, d.name, c.Name)
			}
		}
	}
}

// nonLoopbackOps reports whether args give an --ops-addr other hosts can
// reach.
func nonLoopbackOps(args []string) bool {
	for i, a := range args {
		v, found := strings.CutPrefix(a, "--ops-addr=")
		if !found {
			if a != "--ops-addr" || i+1 >= len(args) {
				continue
			}
			v = args[i+1]
		}
		host := v
		if j := strings.LastIndex(v, ":"); j >= 0 {
			host = strings.Trim(v[:j], "[]")
		}
		return !(host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1")
	}
	return false
}

func metav1LabelSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, errors.New("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

func checkPodSpec(what, name string, spec corev1.PodSpec, long bool) {
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		fail("k8s %s %s: runAsNonRoot not set", what, name)
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			fail("k8s %s %s/%s: resource requests/limits missing", what, name, c.Name)
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.ContainerName != c.Name {
				fail("k8s %s %s/%s: resourceFieldRef names container %q", what, name, c.Name, e.ValueFrom.ResourceFieldRef.ContainerName)
			}
		}
	}
	if !long {
		return
	}
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 45 {
		fail("k8s %s %s: terminationGracePeriodSeconds must exceed the 20 s revoke timeout + final commit", what, name)
	}
	for _, c := range spec.Containers {
		ports := map[string]bool{}
		for _, p := range c.Ports {
			ports[p.Name] = true
		}
		for kind, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if pr == nil || pr.HTTPGet == nil {
				fail("k8s %s %s/%s: no HTTP %s probe", what, name, c.Name, kind)
				continue
			}
			want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[kind]
			if pr.HTTPGet.Path != want || !ports[pr.HTTPGet.Port.String()] {
				fail("k8s %s %s/%s: %s probe %s on port %s", what, name, c.Name, kind, pr.HTTPGet.Path, pr.HTTPGet.Port.String())
			}
		}
		mounts := map[string]bool{}
		for _, v := range spec.Volumes {
			mounts[v.Name] = true
		}
		for _, m := range c.VolumeMounts {
			if !mounts[m.Name] {
				fail("k8s %s %s/%s: mount of undefined volume %s", what, name, c.Name, m.Name)
			}
		}
	}
}

func splitYAML(b []byte) [][]byte {
	var out [][]byte
	for _, part := range strings.Split("\n"+string(b), "\n---") {
		trimmed := strings.TrimSpace(part)
		if trimmed == "" {
			continue
		}
		// Skip documents that are only comments.
		only := true
		for _, l := range strings.Split(trimmed, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				only = false
				break
			}
		}
		if !only {
			out = append(out, []byte(part))
		}
	}
	return out
}

// ---- Prometheus rules and dashboard queries -------------------------------------

func checkRules(path string) {
	groups, errs := rulefmt.ParseFile(path, false)
	for _, e := range errs {
		fail("alerts.yml: %v", e)
	}
	if len(errs) == 0 {
		n := 0
		for _, g := range groups.Groups {
			n += len(g.Rules)
		}
		ok("alerts.yml: %d groups, %d rules parsed by prometheus/model/rulefmt (PromQL and templates)", len(groups.Groups), n)
	}
}

func checkDashboard(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("dashboard: %v", err)
		return
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		fail("dashboard: %v", err)
		return
	}
	// Grafana substitutes its variables before Prometheus sees the query.
	r := strings.NewReplacer("$__rate_interval", "1m", "$pipeline", ".*")
	n := 0
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			n++
			if _, err := parser.ParseExpr(r.Replace(t.Expr)); err != nil {
				fail("dashboard %q: %v in %s", p.Title, err, t.Expr)
			}
		}
	}
	ok("dashboard: %d queries parsed by the PromQL parser", n)
}
