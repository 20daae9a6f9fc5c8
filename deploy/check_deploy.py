#!/usr/bin/env python3
"""Static checks of the deployment artefacts (no Docker, no cluster needed).

    python3 deploy/check_deploy.py            # from the repository root

It checks that:
  1. every YAML file under deploy/{compose,k8s,prometheus,grafana} parses;
  2. the Grafana dashboard JSON parses and matches gen_dashboard.py's output;
  3. every metric used in alerts.yml and the dashboard is defined in the Go
     code (prometheus.New*[Vec|Func](…Opts{Name: "..."}) outside tests), `_bucket`/`_sum`/
     `_count` only on histograms, and every label an expression groups,
     matches or prints ({{label}}) is one that some metric of the expression
     carries (vector labels, the runtime's and pgsink's constant labels, and
     the target labels added by scraping);
  4. every sluice command line in the compose file and the Kubernetes
     manifests names an existing subcommand and existing flags (the binary's
     --help is run with the same arguments) and `run` names known pipelines;
  5. every environment variable the compose file, the ConfigMap/Secret and
     the containers' env set is one the code reads.

Needs Python 3 with PyYAML and Go (to build the binary). Exit status 1 on
any finding.
"""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
YAML_DIRS = ["compose", "k8s", "prometheus", "grafana"]
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "sluice-overview.json"

# Labels Prometheus itself attaches to every scraped series (static configs,
# the compose dns_sd relabelling and deploy/prometheus/k8s-scrape.yml).
TARGET_LABELS = {"job", "instance", "service", "namespace", "pod"}
# Metrics not defined in the Go code that the artefacts may use.
EXTERNAL_METRICS = {"up": set()}
# Constant labels added with prometheus.WrapRegistererWith, by source dir.
WRAPPED_LABELS = {"stages/run/": {"pipeline"}, "sinks/pgsink/": {"pipeline", "table"}}
# Environment variables read by the Go runtime rather than sluice.
RUNTIME_ENV = {"GOMEMLIMIT", "GOMAXPROCS", "GOGC"}

findings = []


def finding(msg):
    findings.append(msg)
    print("FAIL " + msg)


def ok(msg):
    print("ok   " + msg)


# ---- 1. YAML ----------------------------------------------------------------

def check_yaml():
    docs = {}
    for d in YAML_DIRS:
        for p in sorted((DEPLOY / d).rglob("*")):
            if p.suffix not in (".yaml", ".yml"):
                continue
            try:
                with open(p) as f:
                    docs[p] = [x for x in yaml.safe_load_all(f) if x is not None]
                ok(f"yaml  {p.relative_to(ROOT)} ({len(docs[p])} document(s))")
            except yaml.YAMLError as e:
                finding(f"yaml  {p.relative_to(ROOT)}: {e}")
    return docs


# ---- 2. dashboard -----------------------------------------------------------

def check_dashboard():
    try:
        dash = json.loads(DASHBOARD.read_text())
    except (OSError, ValueError) as e:
        finding(f"json  {DASHBOARD.relative_to(ROOT)}: {e}")
        return None
    ok(f"json  {DASHBOARD.relative_to(ROOT)} ({len(dash.get('panels', []))} panels)")
    r = subprocess.run([sys.executable, str(DEPLOY / "grafana" / "gen_dashboard.py"), "--check"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        finding(f"json  dashboard differs from gen_dashboard.py: {r.stderr.strip()}")
    else:
        ok("json  dashboard is what gen_dashboard.py generates")
    ids = [p["id"] for p in dash["panels"]]
    if len(ids) != len(set(ids)):
        finding("json  duplicate panel ids")
    return dash


# ---- 3. metrics -------------------------------------------------------------

DEF_RE = re.compile(
    r'New(Counter|Gauge|Histogram|Summary)(Vec|Func)?\(\s*prometheus\.\w+Opts\{\s*Name:\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"'
    r'.*?\}(?:,\s*\[\]string\{([^}]*)\})?\)',
    re.S)

FACTORY_RE = re.compile(
    r'\.(Counter|Gauge|Histogram|Summary)(Vec)?\(\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)",\s*"(?:[^"\\]|\\.)*"((?:,\s*(?:"[^"]*"|[\w.]+(?:\([^()]*\))?))*)\)')


def go_metrics():
    """name -> (kind, labels) for every metric defined outside tests."""
    defs = {}
    for p in ROOT.rglob("*.go"):
        rel = p.relative_to(ROOT).as_posix()
        if p.name.endswith("_test.go") or rel.startswith(("deploy/", "bench/", ".")):
            continue
        src = p.read_text()
        found = [m.groups() for m in DEF_RE.finditer(src)]
        # internal/promreg's Factory: f.CounterVec("name", "help", "label"...)
        found += [(kind, vec, name, rest) for kind, vec, name, rest in FACTORY_RE.findall(src)]
        for kind, _vec, name, labels in found:
            ls = set(re.findall(r'"([^"]+)"', labels or ""))
            for prefix, extra in WRAPPED_LABELS.items():
                if rel.startswith(prefix):
                    ls |= extra
            defs[name] = (kind.lower(), ls)
    return defs


METRIC_TOKEN = re.compile(r"\b((?:sluice|smap)_[a-z0-9_]+|up)\b(?!\s*\()")
GROUP_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHER_RE = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
LEGEND_RE = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")  # Grafana legends
TEMPLATE_LABEL_RE = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")  # alert templates
AGG_RE = re.compile(r"\b(?:sum|max|min|avg|count|topk|bottomk)\b\s*(?:by|without)?\s*\(")


def resolve(token, defs):
    """(base name, kind, labels) of a metric token, or None."""
    if token in defs:
        return token, defs[token][0], set(defs[token][1])
    if token in EXTERNAL_METRICS:
        return token, "external", set(EXTERNAL_METRICS[token])
    for suf in ("_bucket", "_sum", "_count"):
        base = token[: -len(suf)]
        if token.endswith(suf) and base in defs and defs[base][0] in ("histogram", "summary"):
            labels = set(defs[base][1])
            if suf == "_bucket":
                labels.add("le")
            return base, defs[base][0], labels
    return None


def strip_strings(expr):
    # Label values may contain anything; keep the quotes so MATCHER_RE still
    # sees `name="`.
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def output_labels(bare, labels):
    """Labels the result series of an alert expression can carry: the union
    of its by() lists when it aggregates by something, nothing when it
    aggregates everything away, else the labels of its metrics."""
    by = [l.strip() for g in re.findall(r"\bby\s*\(([^)]*)\)", bare) for l in g.split(",") if l.strip()]
    if by:
        return set(by)
    if AGG_RE.search(bare) and not re.search(r"\bwithout\s*\(", bare):
        return set()
    return labels


def check_expr(where, expr, defs, legend="", template=""):
    bare = strip_strings(expr)
    tokens = set(METRIC_TOKEN.findall(bare))
    if not tokens:
        finding(f"metric {where}: no metric in {expr!r}")
        return set()
    labels, used = set(TARGET_LABELS), set()
    for t in sorted(tokens):
        r = resolve(t, defs)
        if r is None:
            finding(f"metric {where}: {t} is not defined in the Go code")
            continue
        used.add(r[0])
        labels |= r[2]
    for grp in GROUP_RE.findall(bare):
        for l in filter(None, (x.strip() for x in grp.split(","))):
            if l not in labels:
                finding(f"label  {where}: '{l}' is not a label of {sorted(tokens)}")
    for l in MATCHER_RE.findall(bare):
        if l not in labels:
            finding(f"label  {where}: matcher on '{l}', not a label of {sorted(tokens)}")
    for l in LEGEND_RE.findall(legend):
        if l not in labels:
            finding(f"label  {where}: legend uses '{l}', not a label of {sorted(tokens)}")
    out = output_labels(bare, labels)
    for l in TEMPLATE_LABEL_RE.findall(template):
        if l not in out:
            finding(f"label  {where}: template uses $labels.{l}; the alert's series carry only {sorted(out)}")
    return used


def check_metrics(docs, dash):
    defs = go_metrics()
    ok(f"metric {len(defs)} metrics defined in the Go code")
    used = set()
    alerts = docs.get(DEPLOY / "prometheus" / "alerts.yml", [{}])[0]
    n = 0
    for g in alerts.get("groups", []):
        for r in g.get("rules", []):
            n += 1
            name = r.get("alert") or r.get("record")
            text = " ".join(str(v) for v in (r.get("labels") or {}).values())
            text += " " + " ".join(str(v) for v in (r.get("annotations") or {}).values())
            # Template variables of annotations name labels of the alert's
            # series ({{ $labels.x }}); query "..." inside templates is PromQL.
            used |= check_expr(f"alerts.yml {name}", r["expr"], defs, template=text)
            for q in re.findall(r'query \\?"(.*?)\\?"', text):
                used |= check_expr(f"alerts.yml {name} (template query)", q, defs)
    ok(f"metric alerts.yml: {n} rules checked")
    if dash is not None:
        n = 0
        for p in dash["panels"]:
            for t in p.get("targets", []):
                n += 1
                used |= check_expr(f"dashboard '{p['title']}' {t['refId']}", t["expr"], defs,
                                   legend=t.get("legendFormat", ""))
        for v in dash.get("templating", {}).get("list", []):
            q = v.get("definition")
            if q:
                m = re.match(r"label_values\((\w+),\s*(\w+)\)", q)
                if not m or resolve(m.group(1), defs) is None or m.group(2) not in resolve(m.group(1), defs)[2]:
                    finding(f"metric dashboard variable {v['name']}: {q}")
        ok(f"metric dashboard: {n} queries checked")
    unused = sorted(set(defs) - used)
    print(f"info metrics defined but not shown anywhere: {', '.join(unused) or 'none'}")


# ---- 4. command lines ---------------------------------------------------------

def build_binary(tmp):
    out = pathlib.Path(tmp) / "sluice"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/sluice"], cwd=ROOT, check=True)
    return out


def sluice_commands(docs):
    """(where, argv) of every sluice invocation in compose and k8s."""
    cmds = []
    compose = docs.get(DEPLOY / "compose" / "compose.yaml", [{}])[0]
    for name, svc in compose.get("services", {}).items():
        if not str(svc.get("image", "")).startswith("sluice"):
            continue
        cmd, ep = svc.get("command"), svc.get("entrypoint")
        if ep and ep[0] in ("/bin/sh", "sh"):
            script = cmd[0] if isinstance(cmd, list) else cmd
            for part in script.split("&&"):
                argv = shlex.split(part)
                if argv and argv[0] == "/sluice":
                    cmds.append((f"compose {name}", argv[1:]))
        elif cmd:
            cmds.append((f"compose {name}", cmd if isinstance(cmd, list) else shlex.split(cmd)))
    for p, ds in docs.items():
        if p.parent.name != "k8s":
            continue
        for d in ds:
            spec = (d.get("spec") or {})
            pod = ((spec.get("template") or {}).get("spec")) or {}
            for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
                if c.get("image", "").startswith("sluice"):
                    cmds.append((f"k8s {p.name} {d['metadata']['name']}/{c['name']}", c.get("args") or []))
    return cmds


def check_commands(docs, binary):
    pipelines = None
    for where, argv in sluice_commands(docs):
        sub = [a for a in argv if not a.startswith("-")]
        r = subprocess.run([str(binary), *argv, "--help"], capture_output=True, text=True,
                           env={"PATH": os.environ.get("PATH", "")})
        usage = re.search(r"^Usage:\n\s+(.*)$", r.stdout, re.M)
        if r.returncode != 0 or not usage:
            finding(f"cmd   {where}: `sluice {' '.join(argv)}`: {r.stderr.strip() or 'no usage'}")
            continue
        # cobra prints the parent's help ("sluice topics [command]") for an
        # unknown sub-subcommand: the usage line must be a leaf command whose
        # path is the leading words of the argument list.
        line = usage.group(1)
        path = [w for w in line.split()[1:] if re.fullmatch(r"[a-z][a-z-]*", w)]
        if "[command]" in line or sub[: len(path)] != path:
            finding(f"cmd   {where}: `sluice {' '.join(argv)}` resolves to `{line}`")
            continue
        if sub and sub[0] == "run":
            if pipelines is None:
                # run --help lists one pipeline a line: "  name  doc".
                m = re.search(r"^Pipelines:\n((?:  \S.*\n?)+)", r.stdout, re.M)
                pipelines = set(l.split()[0] for l in m.group(1).splitlines()) if m else set()
            # Values of flags are not pipelines.
            names, skip = [], False
            for a in argv[1:]:
                if skip:
                    skip = False
                    continue
                if a.startswith("-"):
                    skip = "=" not in a
                    continue
                names.append(a)
            bad = [n for n in names if n not in pipelines]
            if bad or not names:
                finding(f"cmd   {where}: unknown pipeline(s) {bad or '(none)'}; known {sorted(pipelines)}")
                continue
        ok(f"cmd   {where}: sluice {' '.join(argv)}")


# ---- 5. environment variables -------------------------------------------------

def code_env_vars():
    names = set()
    for p in list((ROOT / "cmd").rglob("*.go")) + list((ROOT / "internal" / "kconf").rglob("*.go")):
        if p.name.endswith("_test.go"):
            continue
        text = p.read_text()
        names |= set(re.findall(r'(?:(?:Getenv|LookupEnv|envOr)\(|envFlag\(cmd,\s*)"([A-Z0-9_]+)"', text))
        # secret-bearing settings read after flag parsing (root.go's
        # secretsFromEnv table: {"flag-name", "ENV_NAME", &dst})
        names |= set(re.findall(r'\{"[a-z0-9-]+",\s*"([A-Z0-9_]+)",\s*&', text))
    # Pipelines read their own settings through an injected getenv
    # (getenv("AI_BASE_URL"), get("UW_API_KEY"), dur("MODULES_ERROR_COOLDOWN"), tables of
    # {"TRADES_DIGEST_GRACE", &d.Grace}).
    for p in (ROOT / "pipelines").rglob("*.go"):
        if p.name.endswith("_test.go"):
            continue
        text = p.read_text()
        names |= set(re.findall(r'(?:[Gg]etenv|\bget|\bdur|LookupEnv)\("([A-Z0-9_]+)"', text))
        names |= set(re.findall(r'\{"([A-Z0-9_]+)",\s*&', text))
    return names


def check_env(docs):
    known = code_env_vars() | RUNTIME_ENV
    compose = docs.get(DEPLOY / "compose" / "compose.yaml", [{}])[0]
    for name, svc in compose.get("services", {}).items():
        if not str(svc.get("image", "")).startswith("sluice"):
            continue
        for k in (svc.get("environment") or {}):
            if k not in known:
                finding(f"env   compose {name}: {k} is not read by sluice")
    for p, ds in docs.items():
        if p.parent.name != "k8s":
            continue
        for d in ds:
            if d.get("kind") in ("ConfigMap", "Secret"):
                for k in list((d.get("data") or {})) + list((d.get("stringData") or {})):
                    if k not in known:
                        finding(f"env   {p.name} {d['kind']} {d['metadata']['name']}: {k} is not read by sluice")
            spec = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                for e in c.get("env") or []:
                    if e["name"] not in known:
                        finding(f"env   {p.name} {d['kind']} {d['metadata']['name']}/{c['name']}: {e['name']} is not read by sluice")
    ok(f"env   compose, ConfigMap/Secret keys and container env are all read by sluice ({len(known)} known)")


def main():
    docs = check_yaml()
    dash = check_dashboard()
    check_metrics(docs, dash)
    with tempfile.TemporaryDirectory() as tmp:
        check_commands(docs, build_binary(tmp))
    check_env(docs)
    if findings:
        print(f"\n{len(findings)} finding(s)")
        sys.exit(1)
    print("\nall deploy checks passed")


if __name__ == "__main__":
    main()
