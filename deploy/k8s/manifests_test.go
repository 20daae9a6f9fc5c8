// Package k8s_test checks the Kubernetes manifests of this directory
// statically (no cluster): what kustomization.yaml applies, memory limits
// and GOMEMLIMIT, probes, the environment every pipeline needs and where
// its secrets come from. deploy/validate decodes the same files strictly
// into the k8s.io/api types; this test runs with the product's tests.
package k8s_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/pipelines/registry"
)

// Files kept out of kustomization.yaml on purpose: the Secrets' template
// (applying it would overwrite real credentials) and the optional HPA.
var notApplied = []string{"secret.template.yaml", "hpa.example.yaml"}

// pipelineEnv lists, per pipeline, the variables its container must set
// (from env; the ConfigMap and the Secret sluice-secrets come through
// envFrom), besides SLUICE_API_TOKEN and GOMEMLIMIT that every worker sets.
var pipelineEnv = map[string][]string{
	"trades": {"BROKER_TOKEN_KEY", "AI_BASE_URL", "AI_HMAC_KEY_ID", "AI_HMAC_SECRET", "AI_TIMEOUT_MS",
		"BROKER_RATE_LIMIT_SAFETY_MS", "TRADES_IMPORT_DEDUPE_WINDOW", "TRADES_DIGEST_GRACE", "TRADES_DIGEST_SETTLE",
		"TRADES_DIGEST_HORIZON"},
	"modules": {"MODULES_SOURCE", "UW_BASE_URL", "UW_API_KEY", "MODULES_RATE_LIMIT", "MODULES_ERROR_COOLDOWN",
		"MODULES_ASSEMBLE_BUDGET"},
}

// apiPipelines serve an API on the ops port: their Services must be hosts
// the API accepts (SLUICE_API_HOSTS).
var apiPipelines = []string{"ticks", "smap", "trades", "modules"}

// requiredSecrets are secret keys without which a pipeline must not start:
// their secretKeyRef may not be optional.
var requiredSecrets = map[string][]string{"trades": {"BROKER_TOKEN_KEY"}}

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type envVar struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef     *secretKeyRef `yaml:"secretKeyRef"`
		ResourceFieldRef *struct {
			ContainerName string `yaml:"containerName"`
			Resource      string `yaml:"resource"`
		} `yaml:"resourceFieldRef"`
	} `yaml:"valueFrom"`
}

type secretKeyRef struct {
	Name     string `yaml:"name"`
	Key      string `yaml:"key"`
	Optional bool   `yaml:"optional"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name    string   `yaml:"name"`
	Args    []string `yaml:"args"`
	Env     []envVar `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *meta `yaml:"configMapRef"`
		SecretRef    *meta `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

// object is every kind the manifests use, decoded loosely: Service's
// selector is a map, the workloads' one is under matchLabels.
type object struct {
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Resources  []string          `yaml:"resources"`
	Spec       struct {
		Selector    any `yaml:"selector"`
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		Template struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				Containers     []container `yaml:"containers"`
				InitContainers []container `yaml:"initContainers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
	file string
}

func (o object) workload() bool { return o.Kind == "Deployment" || o.Kind == "StatefulSet" }

// readManifests parses every YAML document of every *.yaml file here.
func readManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var all []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" {
				continue
			}
			o.file = f
			all = append(all, o)
		}
	}
	return all
}

// bytesOf parses a Kubernetes quantity (512Mi, 1G, 1048576) or a Go
// GOMEMLIMIT (512MiB).
func bytesOf(q string) (int64, bool) {
	q = strings.TrimSuffix(strings.TrimSpace(q), "B")
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if rest, ok := strings.CutSuffix(q, u.suffix); ok {
			q, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	return n * mult, err == nil && n > 0
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// The kustomization applies every manifest of the directory except the
// two kept out on purpose, and names no missing file.
func TestManifestKustomizationListsEveryFile(t *testing.T) {
	t.Parallel()
	var kust *object
	for _, o := range readManifests(t) {
		if o.Kind == "Kustomization" {
			kust = &o
		}
	}
	if kust == nil {
		t.Fatal("no kustomization.yaml")
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		listed := slices.Contains(kust.Resources, f)
		switch {
		case f == "kustomization.yaml":
		case slices.Contains(notApplied, f) && listed:
			t.Errorf("%s is in kustomization.yaml; it must stay out", f)
		case !slices.Contains(notApplied, f) && !listed:
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
	for _, r := range kust.Resources {
		if _, err := os.Stat(r); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
}

// Every workload container has a memory limit and GOMEMLIMIT at most that
// limit, probes on the ops server, the ConfigMap and the Secret through
// envFrom, and its pipeline's variables; a secret key (a key of a Secret
// in secret.template.yaml) is only ever set from a secretKeyRef to that
// Secret, never as a value nor in the ConfigMap. Every pipeline the binary
// knows runs in some workload.
func TestManifestWorkloads(t *testing.T) {
	t.Parallel()
	objs := readManifests(t)
	secretKeys := map[string]map[string]bool{} // key → Secrets holding it
	var config map[string]string
	for _, o := range objs {
		switch o.Kind {
		case "Secret":
			for k := range o.StringData {
				if secretKeys[k] == nil {
					secretKeys[k] = map[string]bool{}
				}
				secretKeys[k][o.Metadata.Name] = true
			}
		case "ConfigMap":
			config = o.Data
		}
	}
	if len(secretKeys) == 0 || config == nil {
		t.Fatal("no Secret template or ConfigMap")
	}
	for k := range config {
		if secretKeys[k] != nil {
			t.Errorf("ConfigMap holds the secret %s", k)
		}
	}

	running := map[string]bool{}
	workloads := 0
	for _, o := range objs {
		pod := o.Spec.Template.Spec
		for _, c := range append(slices.Clone(pod.Containers), pod.InitContainers...) {
			where := o.file + " " + o.Metadata.Name + "/" + c.Name
			limit, ok := bytesOf(c.Resources.Limits["memory"])
			if !ok {
				t.Errorf("%s: no memory limit (%q)", where, c.Resources.Limits["memory"])
			}
			env := map[string]envVar{}
			for _, e := range c.Env {
				env[e.Name] = e
				if holders := secretKeys[e.Name]; holders != nil {
					var ref *secretKeyRef
					if e.ValueFrom != nil {
						ref = e.ValueFrom.SecretKeyRef
					}
					if ref == nil || e.Value != nil {
						t.Errorf("%s: secret %s not from a secretKeyRef", where, e.Name)
					} else if ref.Key != e.Name || !holders[ref.Name] {
						t.Errorf("%s: %s from Secret %s key %s, which secret.template.yaml does not hold", where, e.Name, ref.Name, ref.Key)
					}
				}
			}
			if !o.workload() {
				continue
			}
			workloads++
			var fromConfig, fromSecret bool
			for _, ef := range c.EnvFrom {
				fromConfig = fromConfig || ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == "sluice-config"
				fromSecret = fromSecret || ef.SecretRef != nil && ef.SecretRef.Name == "sluice-secrets"
			}
			if !fromConfig || !fromSecret {
				t.Errorf("%s: envFrom sluice-config (%v) and sluice-secrets (%v)", where, fromConfig, fromSecret)
			}
			switch gml, ok := env["GOMEMLIMIT"]; {
			case !ok:
				t.Errorf("%s: no GOMEMLIMIT", where)
			case gml.ValueFrom != nil && gml.ValueFrom.ResourceFieldRef != nil:
				if r := gml.ValueFrom.ResourceFieldRef; r.Resource != "limits.memory" || r.ContainerName != c.Name {
					t.Errorf("%s: GOMEMLIMIT from %s of container %q, want limits.memory of %q", where, r.Resource, r.ContainerName, c.Name)
				}
			case gml.Value != nil:
				if v, ok := bytesOf(*gml.Value); !ok || v > limit {
					t.Errorf("%s: GOMEMLIMIT %q above the memory limit %d", where, *gml.Value, limit)
				}
			default:
				t.Errorf("%s: GOMEMLIMIT neither a value nor the memory limit", where)
			}
			for name, p := range map[string]*probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port != "ops" {
					t.Errorf("%s: no %s probe on port ops", where, name)
				}
			}
			if len(c.Args) < 2 || c.Args[0] != "run" {
				t.Errorf("%s: args %q, want run PIPELINE…", where, c.Args)
				continue
			}
			need := []string{"SLUICE_API_TOKEN"}
			for _, p := range c.Args[1:] {
				if strings.HasPrefix(p, "-") {
					break
				}
				running[p] = true
				need = append(need, pipelineEnv[p]...)
				for _, k := range requiredSecrets[p] {
					if e, ok := env[k]; ok && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Optional {
						t.Errorf("%s: %s is optional; pipeline %s needs it", where, k, p)
					}
				}
			}
			for _, k := range need {
				if _, ok := env[k]; !ok {
					t.Errorf("%s: %s is not set", where, k)
				}
			}
		}
	}
	if workloads == 0 {
		t.Fatal("no workload checked")
	}
	for _, s := range registry.All(registry.Settings{}) {
		if !running[s.Name] {
			t.Errorf("pipeline %s runs in no workload", s.Name)
		}
	}
}

// Every Service selects the pods of exactly one workload and, when that
// workload serves an API, is a host the API accepts (SLUICE_API_HOSTS);
// the NetworkPolicy admits every
// workload's pods.
func TestManifestServicesAndPolicy(t *testing.T) {
	t.Parallel()
	objs := readManifests(t)
	var hosts []string
	var policy map[string]string
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			hosts = strings.Split(o.Data["SLUICE_API_HOSTS"], ",")
		case "NetworkPolicy":
			policy = o.Spec.PodSelector.MatchLabels
		}
	}
	services := 0
	for _, o := range objs {
		if o.workload() && !matches(policy, o.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: the NetworkPolicy does not select its pods", o.Metadata.Name)
		}
		if o.Kind != "Service" {
			continue
		}
		services++
		sel := map[string]string{}
		if m, ok := o.Spec.Selector.(map[string]any); ok {
			for k, v := range m {
				sel[k], _ = v.(string)
			}
		}
		n, serves := 0, false
		for _, w := range objs {
			if w.workload() && matches(sel, w.Spec.Template.Metadata.Labels) {
				n++
				for _, c := range w.Spec.Template.Spec.Containers {
					serves = serves || slices.ContainsFunc(c.Args, func(a string) bool { return slices.Contains(apiPipelines, a) })
				}
			}
		}
		if n != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", o.Metadata.Name, n)
		}
		if serves && !slices.Contains(hosts, o.Metadata.Name) {
			t.Errorf("Service %s is not in SLUICE_API_HOSTS %v", o.Metadata.Name, hosts)
		}
	}
	if services == 0 {
		t.Fatal("no Service checked")
	}
}
