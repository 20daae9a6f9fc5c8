#!/usr/bin/env python3
"""Generate deploy/grafana/dashboards/sluice-overview.json.

The dashboard is written here as a list of (title, queries) so that the
layout stays regular and the PromQL is readable; the JSON is the artefact
Grafana loads. After editing, run

    python3 deploy/grafana/gen_dashboard.py

and commit both files; deploy/check_deploy.py fails when they differ.
Every metric must exist in the Go code (check_deploy.py verifies that too).
"""

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "dashboards" / "sluice-overview.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
P = 'pipeline=~"$pipeline"'
RI = "$__rate_interval"


def sel_(sel):
    return f"{{{sel}}}" if sel else ""


def rate(metric, by, sel=P, fn="rate"):
    return f"sum by ({by}) ({fn}({metric}{sel_(sel)}[{RI}]))"


def quantile(q, metric, by, sel=P):
    by = ", ".join(["le"] + [b.strip() for b in by.split(",") if b.strip()])
    return f"histogram_quantile({q}, sum by ({by}) (rate({metric}_bucket{sel_(sel)}[{RI}])))"


# Each section is (row title, [panels]); a panel is a dict with title,
# targets [(expr, legend)], unit and optional kind ("stat") and width.
SECTIONS = [
    ("Overview", [
        dict(kind="stat", w=4, title="Records in /s", unit="ops",
             targets=[(f"sum(rate(sluice_records_in_total{{{P}}}[{RI}]))", "in")]),
        dict(kind="stat", w=4, title="Dead letters /s", unit="ops",
             targets=[(f"sum(rate(sluice_dlq_records_by_reason_total{{{P}}}[{RI}]))", "dlq")],
             thresholds=[("green", None), ("orange", 0.01), ("red", 1)]),
        dict(kind="stat", w=4, title="Consumer lag (records)", unit="short",
             targets=[(f"sum(sluice_consumer_lag{{{P}}})", "lag")],
             thresholds=[("green", None), ("orange", 1000), ("red", 10000)]),
        dict(kind="stat", w=4, title="SCRAPE_SLOW", unit="none",
             targets=[("max(sluice_silver_scrape_slow)", "SCRAPE_SLOW")],
             thresholds=[("green", None), ("red", 1)],
             mappings=[{"type": "value", "options": {
                 "0": {"text": "off", "color": "green"},
                 "1": {"text": "SET", "color": "red"}}}]),
        dict(kind="stat", w=4, title="Assigned partitions", unit="short",
             targets=[(f"sum(sluice_assigned_partitions{{{P}}})", "assigned")]),
        dict(kind="stat", w=4, title="Paused partitions", unit="short",
             targets=[(f"sum(sluice_paused_partitions{{{P}}})", "paused")],
             thresholds=[("green", None), ("orange", 1)]),
    ]),
    ("Throughput", [
        dict(title="Records in per pipeline", unit="ops",
             targets=[(rate("sluice_records_in_total", "pipeline"), "{{pipeline}}")]),
        dict(title="Stage outputs and committed records per pipeline", unit="ops",
             targets=[(rate("sluice_records_out_total", "pipeline"), "{{pipeline}} out"),
                      (rate("sluice_records_done_total", "pipeline"), "{{pipeline}} committed"),
                      (rate("sluice_window_merged_total", "pipeline"), "{{pipeline}} merged in windows")]),
        dict(title="Keys held in coalescing windows (memory under a backlog)", unit="short",
             targets=[(f"sum by (pipeline, instance) (sluice_window_keys{{{P}}})", "{{pipeline}} {{instance}}")]),
    ]),
    # Totals and reasons come from sluice_dlq_records_by_reason_total, whose
    # series exist at 0 from a runner's start; a sluice_dlq_records_total
    # {reason,rule} series appears with its first dead letter, which rate()
    # does not see, so it serves only the per-rule breakdown.
    ("Dead letters", [
        dict(title="Dead letters by reason", unit="ops",
             targets=[(rate("sluice_dlq_records_by_reason_total", "pipeline, reason"), "{{pipeline}} {{reason}}")]),
        dict(title="Dead letters by rule", unit="ops",
             targets=[(rate("sluice_dlq_records_total", "pipeline, rule", sel=P + ',rule!=""'),
                       "{{pipeline}} {{rule}}")]),
    ]),
    ("Lag", [
        dict(title="Consumer lag per partition", unit="short",
             targets=[(f"sum by (pipeline, topic, partition) (sluice_consumer_lag{{{P}}})",
                       "{{pipeline}} {{topic}}/{{partition}}")]),
        dict(title="silver backlog (group lag) and SCRAPE_SLOW", unit="short",
             targets=[("max(sluice_silver_backlog_records)", "backlog"),
                      ("max(sluice_silver_scrape_slow)", "SCRAPE_SLOW")],
             overrides=[{"matcher": {"id": "byName", "options": "SCRAPE_SLOW"},
                         "properties": [{"id": "custom.axisPlacement", "value": "right"},
                                        {"id": "unit", "value": "none"},
                                        {"id": "max", "value": 1}]}]),
    ]),
    ("Batches and latency", [
        dict(title="Batch size (records)", unit="short",
             targets=[(quantile(0.5, "sluice_batch_records", "pipeline"), "{{pipeline}} p50"),
                      (quantile(0.95, "sluice_batch_records", "pipeline"), "{{pipeline}} p95")]),
        dict(title="Sink write latency", unit="s",
             targets=[(quantile(0.5, "sluice_sink_write_duration_seconds", "pipeline"), "{{pipeline}} p50"),
                      (quantile(0.99, "sluice_sink_write_duration_seconds", "pipeline"), "{{pipeline}} p99")]),
        dict(title="Stage latency per record (p99)", unit="s",
             targets=[(quantile(0.99, "sluice_stage_duration_seconds", "pipeline"), "{{pipeline}}")]),
        dict(title="Batch time per phase (p95)", unit="s",
             targets=[(quantile(0.95, "sluice_batch_phase_duration_seconds", "pipeline, phase"),
                       "{{pipeline}} {{phase}}")]),
    ]),
    ("Partitions, retries, errors", [
        dict(title="Assigned partitions per member", unit="short",
             targets=[(f"sum by (pipeline, instance) (sluice_assigned_partitions{{{P}}})",
                       "{{pipeline}} {{instance}}")]),
        dict(title="Paused partitions per member", unit="short",
             targets=[(f"sum by (pipeline, instance) (sluice_paused_partitions{{{P}}})",
                       "{{pipeline}} {{instance}}")]),
        dict(title="Retries by kind", unit="ops",
             targets=[(rate("sluice_retries_total", "pipeline, kind"), "{{pipeline}} {{kind}}")]),
        dict(title="Runtime errors by kind", unit="ops",
             targets=[(rate("sluice_runtime_errors_total", "pipeline, kind"), "{{pipeline}} {{kind}}")]),
        dict(title="Records deleted before they were consumed", unit="short",
             targets=[(f"sum by (pipeline, topic) (increase(sluice_offsets_skipped_total{{{P}}}[$__rate_interval]))",
                       "{{pipeline}} {{topic}}")]),
    ]),
    ("Postgres sink", [
        dict(title="Rows written / merged / rejected", unit="ops",
             targets=[(rate("sluice_pgsink_rows_written_total", "table"), "{{table}} written"),
                      (rate("sluice_pgsink_rows_merged_total", "table"), "{{table}} merged in memory"),
                      (rate("sluice_pgsink_rows_rejected_total", "table, rule"), "{{table}} rejected {{rule}}")]),
        dict(title="Transactions by result", unit="ops",
             targets=[(rate("sluice_pgsink_transactions_total", "table, result"), "{{table}} {{result}}")]),
        dict(title="Write duration (p95)", unit="s",
             targets=[(quantile(0.95, "sluice_pgsink_write_duration_seconds", "table, result"),
                       "{{table}} {{result}}")]),
        dict(title="Items per write (p95)", unit="short",
             targets=[(quantile(0.95, "sluice_pgsink_batch_size", "table"), "{{table}}")]),
    ]),
    ("ticks", [
        dict(title="Segments by result", unit="ops",
             targets=[(rate("sluice_ticks_segments_total", "result", sel=""), "{{result}}")]),
        dict(title="Ticks fetched", unit="ops",
             targets=[("sum(rate(sluice_ticks_fetched_total[$__rate_interval]))", "ticks")]),
        dict(title="Rate limiter decisions", unit="ops",
             targets=[(rate("sluice_ratelimit_decisions_total", "source, decision", sel=""),
                       "{{source}} {{decision}}"),
                      (rate("sluice_ratelimit_errors_total", "source", sel=""), "{{source}} error")]),
        dict(title="Tick source and limiter latency (p95)", unit="s",
             targets=[(quantile(0.95, "sluice_ticks_fetch_duration_seconds", "", sel=""), "tick source"),
                      (quantile(0.95, "sluice_ratelimit_call_duration_seconds", "", sel=""), "limiter call")]),
        dict(title="Job transitions by status", unit="ops",
             targets=[(rate("sluice_ticks_job_transitions_total", "status", sel=""), "{{status}}"),
                      ("sum(rate(sluice_ticks_stalled_jobs_total[$__rate_interval]))", "stalled"),
                      ("sum(rate(sluice_ticks_bootstrapped_jobs_total[$__rate_interval]))", "bootstrapped")]),
        dict(title="Source errors, zombie and dropped tasks", unit="ops",
             targets=[(rate("sluice_ticks_source_errors_total", "type", sel=""), "error {{type}}"),
                      ("sum(rate(sluice_ticks_zombie_tasks_total[$__rate_interval]))", "zombie"),
                      (rate("sluice_ticks_dropped_tasks_total", "why", sel=""), "dropped {{why}}"),
                      ("sum(rate(sluice_ticks_foreign_segments_replaced_total[$__rate_interval]))",
                       "foreign segment replaced")]),
    ]),
    ("smap", [
        dict(title="Projects and items", unit="ops",
             targets=[(rate("smap_projects_total", "outcome", sel=""), "projects {{outcome}}"),
                      (rate("smap_items_collected_total", "platform", sel=""), "collected {{platform}}"),
                      (rate("smap_crawl_errors_total", "platform", sel=""), "crawl errors {{platform}}")]),
        dict(title="Analysis and progress", unit="ops",
             targets=[(rate("smap_items_analysed_total", "result", sel=""), "analysed {{result}}"),
                      (rate("smap_items_finished_total", "status", sel=""), "counted {{status}}"),
                      (rate("smap_completions_published_total", "repeat", sel=""),
                       "job.completed (repeat={{repeat}})")]),
        dict(title="Analysis duration (p95)", unit="s",
             targets=[(quantile(0.95, "smap_analysis_duration_seconds", "", sel=""), "analysis")]),
        dict(title="Progress state ops (p95)", unit="s",
             targets=[(quantile(0.95, "smap_state_op_duration_seconds", "op", sel=""), "{{op}}")]),
    ]),
]


def thresholds(steps):
    out = []
    for color, value in steps or [("green", None)]:
        out.append({"color": color, "value": value})
    return {"mode": "absolute", "steps": out}


def panel(pid, p, x, y, w, h):
    targets = [{"datasource": DS, "expr": e, "legendFormat": l, "refId": chr(ord("A") + i),
                "range": True, "instant": False}
               for i, (e, l) in enumerate(p["targets"])]
    defaults = {"unit": p.get("unit", "short"), "thresholds": thresholds(p.get("thresholds"))}
    if p.get("mappings"):
        defaults["mappings"] = p["mappings"]
    if p.get("kind") == "stat":
        defaults["color"] = {"mode": "thresholds"}
        return {
            "id": pid, "type": "stat", "title": p["title"], "datasource": DS,
            "gridPos": {"x": x, "y": y, "w": w, "h": h},
            "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "area", "textMode": "auto",
                        "justifyMode": "auto", "orientation": "auto"},
        }
    defaults["color"] = {"mode": "palette-classic"}
    defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                          "showPoints": "never", "spanNulls": False}
    return {
        "id": pid, "type": "timeseries", "title": p["title"], "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": p.get("overrides", [])},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def build():
    panels, pid, y = [], 1, 0
    for title, items in SECTIONS:
        panels.append({"id": pid, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        pid, y, x, rowh = pid + 1, y + 1, 0, 0
        for p in items:
            w = p.get("w", 12)
            h = 4 if p.get("kind") == "stat" else 8
            if x + w > 24:
                x, y, rowh = 0, y + rowh, 0
            panels.append(panel(pid, p, x, y, w, h))
            pid, x, rowh = pid + 1, x + w, max(rowh, h)
        y += rowh
    return {
        "uid": "sluice-overview",
        "title": "sluice overview",
        "description": "Runtime, sinks and pipelines of sluice (metrics of `sluice run` on /metrics).",
        "tags": ["sluice", "kafka"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0, "refresh": 1,
             "regex": "", "includeAll": False, "multi": False},
            {"name": "pipeline", "label": "Pipeline", "type": "query", "datasource": DS,
             "query": {"query": "label_values(sluice_records_in_total, pipeline)", "refId": "pipeline"},
             "definition": "label_values(sluice_records_in_total, pipeline)",
             "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
             "includeAll": True, "allValue": ".*", "multi": True, "refresh": 2, "sort": 1,
             "hide": 0, "regex": ""},
        ]},
        "panels": panels,
    }


def render():
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        if OUT.read_text() != render():
            sys.exit(f"{OUT} is out of date: run python3 {pathlib.Path(__file__).as_posix()}")
        sys.exit(0)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT}")
