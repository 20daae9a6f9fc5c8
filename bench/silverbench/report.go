package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/faults"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/pipelines/silver"
)

type tableSum struct {
	rows int64
	sum  string
}

type tableSums struct{ ta, sa tableSum }

// checksums returns, per silver table of schema, the row count and the sum
// of a 64-bit hash of every row's key and value columns (ingest_time
// excluded): equal sums mean equal contents, whatever the row order.
func checksums(ctx context.Context, conn *pgx.Conn, schema string) (tableSums, error) {
	var out tableSums
	for _, t := range []struct {
		name string
		cols []string
		dst  *tableSum
	}{
		{silver.TATableName, silver.TATable().Columns, &out.ta},
		{silver.SATableName, silver.SATable().Columns, &out.sa},
	} {
		q := fmt.Sprintf("SELECT count(*), coalesce(sum(hashtextextended(ROW(%s)::text, 0)::numeric), 0)::text FROM %s",
			strings.Join(t.cols, ", "), pgx.Identifier{schema, t.name}.Sanitize())
		if err := conn.QueryRow(ctx, q).Scan(&t.dst.rows, &t.dst.sum); err != nil {
			return out, fmt.Errorf("checksum %s.%s: %w", schema, t.name, err)
		}
	}
	return out, nil
}

// seedDLQ counts task_q_dlq by reason and rule, and the tasks still ready.
func seedDLQ(ctx context.Context, conn *pgx.Conn, schema string) (map[string]int, int, int64, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT reason, coalesce(rule_id, ''), count(*) FROM %s GROUP BY 1, 2",
		pgx.Identifier{schema, "task_q_dlq"}.Sanitize()))
	if err != nil {
		return nil, 0, 0, err
	}
	out := map[string]int{}
	total := 0
	for rows.Next() {
		var reason, rule string
		var n int
		if err := rows.Scan(&reason, &rule, &n); err != nil {
			return nil, 0, 0, err
		}
		out[reason+" "+rule] += n
		total += n
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, err
	}
	var ready int64
	err = conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE status = 'ready'", pgx.Identifier{schema, "task_q"}.Sanitize())).Scan(&ready)
	return out, total, ready, err
}

func (r *results) verify() {
	add := func(name string, ok bool, info string, args ...any) {
		r.checks = append(r.checks, check{name, ok, fmt.Sprintf(info, args...)})
	}
	p := r.p
	add("corpus verdicts", p.mismatch == 0, "%d record(s) judged differently from the generator's expectation", p.mismatch)
	for _, v := range []string{"a", "m", "b", "c", "p"} {
		s, ok := r.sums[v]
		if !ok {
			continue
		}
		add(v+": row counts", s.ta.rows == int64(len(p.finalTA)) && s.sa.rows == int64(len(p.finalSA)),
			"ta_silver %d (want %d), sa_silver %d (want %d)", s.ta.rows, len(p.finalTA), s.sa.rows, len(p.finalSA))
	}
	cmp := func(x, y, yName string) {
		sx, okx := r.sums[x]
		sy, oky := r.sums[y]
		if okx && oky {
			add(x+": contents = "+yName, sx == sy, "ta sum %s vs %s; sa sum %s vs %s", sx.ta.sum, sy.ta.sum, sx.sa.sum, sy.sa.sum)
		}
	}
	cmp("a", "b", "b")
	cmp("a", "c", "c (expected rows)")
	cmp("m", "a", "a")
	cmp("b", "c", "c (expected rows)")
	cmp("p", "c", "c (expected rows)")
	if sB, ok := r.sums["B"]; ok {
		if sc, ok := r.sums["c"]; ok {
			// Informational: without the lock, records of one key may be
			// applied out of queue order, so a difference is expected.
			r.info = append(r.info, fmt.Sprintf("B (no lock): contents equal to c: %v (ta rows %d, sa rows %d); without the lock two workers may apply records of one key out of queue order, so equality is not guaranteed", sB == sc, sB.ta.rows, sB.sa.rows))
		}
	}
	if r.a != nil {
		add("a: DLQ records", r.a.dlqTotal == p.invalid() && maps.Equal(r.a.dlq, p.dlq),
			"%d in the DLQ topic (want %d); per reason/rule equal: %v", r.a.dlqTotal, p.invalid(), maps.Equal(r.a.dlq, p.dlq))
	}
	if r.b != nil {
		add("b: DLQ records", r.dlqBTotal == p.invalid() && maps.Equal(r.dlqB, p.dlq),
			"%d in task_q_dlq (want %d); per reason/rule equal: %v", r.dlqBTotal, p.invalid(), maps.Equal(r.dlqB, p.dlq))
		add("b: queue drained", r.readyB == 0, "%d task(s) still ready", r.readyB)
	}
	r.verifyPeers(add)
}

func fmtRate(n int, d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", rate(n, d))
}

func orDefault(v any, zero bool, def string) string {
	if zero {
		return def
	}
	return fmt.Sprint(v)
}

func (r *results) markdown() string {
	cfg, p := r.cfg, r.p
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Silver benchmark results")
	w("")
	w("Produced by `make bench-silver` (`bench/silver.sh` → `bench/silverbench`) on %s.", r.started.UTC().Format("2006-01-02 15:04 MST"))
	w("")
	w("| | |")
	w("| --- | --- |")
	w("| machine | %d cores (%s), %s RAM, Linux; load average at start %s (the machine is shared: other processes' CPU is listed below) |", runtimeNumCPU(), cpuModel(), memTotal(), r.loadAvg)
	w("| Kafka | %s |", r.kafkaVer)
	w("| PostgreSQL | %s |", r.pgVer)
	w("| Go | %s |", goVersion())
	w("| corpus | N = %d records, seed %d: %d ta.bar + %d sa.article valid, %d invalid (%.1f %%); %d ta rows and %d sa rows at the end |",
		cfg.n, cfg.seed, p.validTA, p.validSA, p.invalid(), 100*float64(p.invalid())/float64(cfg.n), len(p.finalTA), len(p.finalSA))
	pf := cfg.pipeline
	w("| a: pipeline | bronze topic with %d partitions, 1 process, consumer group of 1 member; run.Config: BatchMaxRecords %s, BatchMaxBytes %s, MaxInFlight %s, BatchLinger %s, Window.MaxKeys %s, Window.MaxAge %s, Window.MaxTotalKeys %s |",
		cfg.partitions,
		orDefault(pf.batchMaxRecords, pf.batchMaxRecords == 0, fmt.Sprintf("%d (silver default)", silver.DefaultBatchMaxRecords)),
		orDefault(pf.batchMaxBytes, pf.batchMaxBytes == 0, fmt.Sprintf("%d MiB (silver default)", silver.DefaultBatchMaxBytes>>20)),
		orDefault(pf.maxInFlight, pf.maxInFlight == 0, "silver default (12 000 or 1.2 × batch)"),
		orDefault(pf.batchLinger, pf.batchLinger == 0, "50ms (runtime default)"),
		orDefault(pf.windowMaxKeys, pf.windowMaxKeys == 0, fmt.Sprintf("%d (silver default)", silver.DefaultWindowMaxKeys)),
		orDefault(pf.windowMaxAge, pf.windowMaxAge == 0, fmt.Sprintf("%s (silver default)", silver.DefaultWindowMaxAge)),
		orDefault(pf.windowMaxTotalKeys, pf.windowMaxTotalKeys == 0, fmt.Sprintf("%d (silver default)", silver.DefaultWindowMaxTotalKeys)))
	w("| b: seed port | %d workers, batches of %d, advisory lock `silver_consume` kept (retry every %s when held) |", seedWorkerCount, seedBatchSize, lockRetry)
	w("")
	w("## Throughput")
	w("")
	w("All rates are records/s over the same N = %d input records.", cfg.n)
	w("")
	w("| variant | what is timed | time | records/s |")
	w("| --- | --- | ---: | ---: |")
	if r.a != nil {
		w("| a. sluice silver pipeline | separate process: start → every record's effects durable (%d rows upserted or DLQ'd) | %.2f s | **%s** |",
			cfg.n, r.a.run.Seconds(), fmtRate(cfg.n, r.a.run))
		w("| (a. produce, separately) | producing the corpus to the bronze topic | %.2f s | %s |", r.a.produce.Seconds(), fmtRate(cfg.n, r.a.produce))
		if r.floor > 0 {
			w("| (Kafka consume floor) | a separate process that only fetches the N records (no decode, no database) | %.2f s | %s |", r.floor.Seconds(), fmtRate(cfg.n, r.floor))
		}
	}
	if m := r.m; m != nil {
		what := fmt.Sprintf("a in a %d MiB memory cgroup, GOMEMLIMIT=%d (deploy/k8s/silver.yaml)", m.memLimit>>20, m.memLimit)
		if m.failure != "" {
			w("| m. a under a memory limit | %s: **%s**, %.0f of %d records done | – | – |", what, m.failure, m.done, cfg.n)
		} else {
			w("| m. a under a memory limit | %s | %.2f s | **%s** |", what, m.run.Seconds(), fmtRate(cfg.n, m.run))
		}
	}
	if r.b != nil {
		w("| b. seed design (Go port) | first batch → task_q has no ready task | %.2f s | **%s** |", r.b.Run.Seconds(), fmtRate(cfg.n, r.b.Run))
	}
	if r.bUnlocked != nil {
		w("| (B. seed port without the advisory lock) | informational: 2 workers really concurrent (%d deadlocks retried) | %.2f s | %s |", r.bUnlocked.Deadlocks, r.bUnlocked.Run.Seconds(), fmtRate(cfg.n, r.bUnlocked.Run))
	}
	if r.c != nil {
		w("| c. database ceiling | the two INSERT … SELECT … ON CONFLICT (ta %.2f s, sa %.2f s) | %.2f s | **%s** |",
			r.c.ta.Seconds(), r.c.sa.Seconds(), r.c.total().Seconds(), fmtRate(cfg.n, r.c.total()))
	}
	r.peerThroughput(w)
	if r.p2 != nil {
		w("| c′. full ingest ceiling | COPY of the final rows into temporary staging tables (ta %.2f s, sa %.2f s) + the two upserts (%.2f s), all timed | %.2f s | **%s** |",
			r.p2.copyTA.Seconds(), r.p2.copySA.Seconds(), r.p2.upsert.total().Seconds(), r.p2.total().Seconds(), fmtRate(cfg.n, r.p2.total()))
	}
	w("")
	if r.a != nil {
		w("Peak RSS of the sluice pipeline process (VmHWM): **%d MiB**; its CPU time: %.1f s (%.0f %% of one core over the run); machine CPU busy during a: %.0f %%.",
			r.a.peakRSSKB/1024, r.a.cpu.Seconds(), 100*r.a.cpu.Seconds()/r.a.committed.Seconds(), 100*r.a.machine)
		w("Offsets were committed (group lag 0) %.2f s after the start (commits run every second; not part of the rate).", r.a.committed.Seconds())
		w("CPU time by process during a: %s.", r.a.cpuSplit)
		w("")
	}
	if m := r.m; m != nil {
		w("m: peak RSS (VmHWM) **%d MiB**, cgroup peak usage %d MiB of %d MiB, limit hit (failcnt) %d times, OOM kills %d, /metrics scrapes unanswered within 2 s: %d; CPU by process: %s.",
			m.peakRSSKB/1024, m.cg.peak>>20, m.memLimit>>20, m.cg.failcnt, m.cg.oomKills, m.misses, m.cpuSplit)
		w("")
	}
	if r.b != nil {
		w("b: %d batches, %d lock misses, %.1f s of the workers' time in the seed's per-batch backlog check (count of ready tasks + flag upsert); machine CPU busy during b: %.0f %%.",
			r.b.Batches, r.b.LockMisses, r.b.Backlog.Seconds(), 100*r.b.machine)
		w("Seed workers' process: peak RSS %d MiB, CPU %.1f s. CPU time by process during b: %s.", r.b.PeakRSSKB/1024, r.b.CPU.Seconds(), r.b.cpuSplit)
		w("")
	}
	if r.c != nil {
		w("c: the untimed preparation (creating the staging tables, COPY of the %d final rows, VACUUM ANALYZE) took %.2f s.", len(p.finalTA)+len(p.finalSA), r.c.load.Seconds())
		w("")
	}
	r.peerResources(w)
	r.whereTimeGoes(w)
	w("## Ratios")
	w("")
	w("| ratio | value | target | |")
	w("| --- | ---: | ---: | --- |")
	if r.a != nil && r.b != nil {
		ab := r.b.Run.Seconds() / r.a.run.Seconds()
		w("| a/b | %.1f | ≥ 10 | %s |", ab, passMiss(ab >= 10))
		if nb := r.b.Run - r.b.Backlog; nb > 0 {
			w("| a/b without the seed's backlog check (b − %.0f s) | %.1f | (information) | |", r.b.Backlog.Seconds(), nb.Seconds()/r.a.run.Seconds())
		}
	}
	if r.a != nil && r.bUnlocked != nil {
		w("| a/B (seed port without its lock) | %.1f | (information) | |", r.bUnlocked.Run.Seconds()/r.a.run.Seconds())
	}
	if r.a != nil && r.c != nil {
		ac := r.c.total().Seconds() / r.a.run.Seconds()
		w("| a/c (c leaves the COPY untimed: not reachable by any client, kept for comparison) | %.2f | (information) | |", ac)
	}
	if r.a != nil && r.p2 != nil {
		ap := r.p2.total().Seconds() / r.a.run.Seconds()
		w("| a/c′ (the full ingest ceiling) | %.2f | ≥ %.2f | %s |", ap, ceilingTarget, passMiss(ap >= ceilingTarget))
	}
	if r.a != nil && r.m != nil {
		if r.m.failure != "" {
			w("| a/m (a's time over m's) | – (%s) | ≥ 0.8 | %s |", r.m.failure, passMiss(false))
		} else {
			am := r.a.run.Seconds() / r.m.run.Seconds()
			w("| a/m (a's time over m's) | %.2f | ≥ 0.8 | %s |", am, passMiss(am >= 0.8))
		}
	}
	r.peerRatios(w)
	if r.a != nil {
		w("| a: peak RSS | %d MiB | ≤ 400 MiB | %s |", r.a.peakRSSKB/1024, passMiss(r.a.peakRSSKB <= 400<<10))
	}
	w("")
	r.whyAC(w)
	w("## Correctness")
	w("")
	w("| check | result | |")
	w("| --- | --- | --- |")
	for _, c := range r.checks {
		w("| %s | %s | %s |", c.name, passMiss(c.ok), c.info)
	}
	w("")
	for _, i := range r.info {
		w("%s.", i)
		w("")
	}
	keys := slices.Sorted(maps.Keys(p.dlq))
	w("Dead-lettered records per reason and rule (expected = a = b = k = w when the checks pass):")
	w("")
	w("| reason | rule | expected | a | b |%s", r.peerDLQHeader())
	w("| --- | --- | ---: | ---: | ---: |%s", strings.Repeat(" ---: |", len(r.peers)))
	for _, k := range keys {
		reason, rule, _ := strings.Cut(k, " ")
		av, bv := "–", "–"
		if r.a != nil {
			av = fmt.Sprint(r.a.dlq[k])
		}
		if r.b != nil {
			bv = fmt.Sprint(r.dlqB[k])
		}
		w("| %s | %s | %d | %s | %s |%s", reason, rule, p.dlq[k], av, bv, r.peerDLQCells(k))
	}
	w("")
	w("## Method")
	w("")
	w("- **a** runs `silverbench pipeline` as its own process: `silver.Services` on the same environment `sluice run silver` builds (pgx pool from DATABASE_URL, Prometheus registry with Go/process collectors, ops HTTP server, the backlog monitor), with the run's prefixed topics (`<prefix>bronze.records`, `.dlq`, `control.flags`), a unique consumer group and a fresh schema (search_path). The corpus is produced first (record i has timestamp T0 + i ms); the clock starts when the process is started and stops when its `sluice_records_done_total` (records whose effects are durable and whose offsets are marked) reaches N, polled every 100 ms.")
	w("- **b** ports the seed's `silver_consume` worker to Go/pgx: task_q loaded with the same N envelopes in corpus order (first_seen = T0 + i ms), 2 workers on their own connections, each iteration: `pg_try_advisory_lock(hashtext('silver_consume'))` (not acquired: the seed exits and is restarted; the port retries after %s), one transaction that selects 500 ready tasks `FOR UPDATE SKIP LOCKED` ordered by (priority, first_seen), validates each with `silver.Decode` + the silver validator (the same code as a), then per task one single-row `INSERT … ON CONFLICT DO UPDATE` (the sink's SET clause) + `DELETE FROM task_q`, or `INSERT INTO task_q_dlq` + `UPDATE task_q SET status='dlq'`, then the seed's backlog check, `COMMIT`, `pg_advisory_unlock`. Because the lock is kept, only one worker consumes at a time (as in the seed, whose lock exists to make the consumer single); the second worker only retries the lock.", lockRetry)
	w("- **c** pre-loads the final rows (corpus merged per key in memory with `silver.MergeTA`/`MergeSA`) into UNLOGGED staging tables, then times only `INSERT INTO ta_silver … SELECT … FROM stage_ta ON CONFLICT … DO UPDATE SET <the sink's merge SQL>` and the same for sa_silver, one after the other, into empty tables, without ORDER BY (as the sink's statement). Its rate is N / (time of the two statements), i.e. computed over the same N input records as a and b, although it writes only the %d final rows.", len(p.finalTA)+len(p.finalSA))
	w("- Ratios: a/b = rate(a)/rate(b) = time(b)/time(a); a/c = rate(a)/rate(c) = time(c)/time(a).")
	w("- Checks: every variant's tables are compared by row count and by the sum of `hashtextextended(ROW(key and value columns)::text, 0)` over all rows (ingest_time excluded); c holds exactly the expected rows, so a = c and b = c mean both produced the expected contents. The DLQ topic of a is read back and counted by its `dlq.reason`/`dlq.rule` headers.")
	w("- The children run from symbolic links named `silver-pipeline` (a), `seed-workers` (b) and `consume-floor`, so the per-process CPU split (sampled from /proc every 500 ms, exited processes counted up to their last sample) tells them apart from the harness, which holds the corpus and is garbage-collected before each timed section.")
	w("- A CHECKPOINT runs before each timed section. The PostgreSQL settings are the stack's, the same for all three variants.")
	r.peerMethod(w)
	return b.String()
}

func passMiss(ok bool) string {
	if ok {
		return "met"
	}
	return "**MISSED**"
}

func runtimeNumCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\nprocessor") + 1
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(v), &kb)
			return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

// whereTimeGoes writes the breakdown of variants a and b.
func (r *results) whereTimeGoes(w func(string, ...any)) {
	p := r.p
	if r.a == nil && r.b == nil {
		return
	}
	w("## Where the time goes")
	w("")
	if a := r.a; a != nil && a.metrics != "" {
		m := func(name, label string) float64 { v, _ := faults.MetricSum(a.metrics, name, label); return v }
		batches := m("sluice_batch_records_count", "")
		written := m("sluice_pgsink_rows_written_total", "")
		merged := m("sluice_pgsink_rows_merged_total", "")
		upserted := written - merged
		windowMerged := m("sluice_window_merged_total", "")
		writes := m("sluice_sink_write_duration_seconds_count", "")
		final := float64(len(p.finalTA) + len(p.finalSA))
		w("- **a**: %d records in %.0f batches (%.0f records on average), handled by %d partition workers. Summed over the workers: decode + validate %.1f s, sink writes %.1f s, DLQ produce %.1f s.",
			r.cfg.n, batches, float64(r.cfg.n)/max(batches, 1), r.cfg.partitions,
			m("sluice_batch_phase_duration_seconds_sum", `phase="process"`), m("sluice_batch_phase_duration_seconds_sum", `phase="write"`),
			m("sluice_batch_phase_duration_seconds_sum", `phase="dlq"`))
		w("- The sink upserted %.0f rows in %.0f writes: the %d valid records minus %.0f merged in memory with an earlier record of the same key in the same coalescing window and %.0f in the same write. %.0f of them inserted a new key and %.0f updated a row written by an earlier write (the corpus repeats each key about %.1f times, spread over the whole stream). c writes only the %.0f final rows, all of them inserts.",
			upserted, writes, p.valid, windowMerged, merged, final, upserted-final, float64(p.valid)/final, final)
		w("- CPU during a (2 cores × %.1f s = %.1f s available, %.0f %% used): PostgreSQL %.1f s, the pipeline process %.1f s, Kafka %.1f s. Profiles of the pipeline process: `go tool pprof bench/.work/silverbench bench/.work/pipeline.cpu.pprof` (CPU) and `bench/.work/pipeline.allocs.pprof` (allocations) after a run with `SILVER_ARGS=--profile`.",
			a.run.Seconds(), 2*a.run.Seconds(), 100*a.machine, a.cpuBy["postgres"].Seconds(), a.cpu.Seconds(), a.cpuBy["java"].Seconds())
	}
	if b := r.b; b != nil {
		w("- **b**: %d batches of up to %d tasks, one worker at a time (the other waited for the advisory lock %d times). Each task costs 2 statements (upsert + delete, or DLQ insert + status update), each a client–server round trip; the per-batch backlog check (`count(*)` over the ready tasks of a queue that starts at %d) took %.0f s of the %.0f s. The seed workers' process used %.1f s of CPU, largely in the system calls and scheduling of those round trips.",
			b.Batches, seedBatchSize, b.LockMisses, r.cfg.n, b.Backlog.Seconds(), b.Run.Seconds(), b.CPU.Seconds())
	}
	w("")
}

// whyAC explains, with the run's numbers, what bounds a/c when it misses.
func (r *results) whyAC(w func(string, ...any)) {
	a, c := r.a, r.c
	if a == nil || c == nil {
		return
	}
	target, name := c.total(), "a/c"
	if r.p2 != nil {
		target, name = r.p2.total(), "a/c′"
	}
	if target.Seconds()/a.run.Seconds() >= ceilingTarget {
		return
	}
	pg, kafka := a.cpuBy["postgres"], a.cpuBy["java"]
	need := target.Seconds() / ceilingTarget
	floor := (a.cpu + pg + kafka).Seconds() / 2
	w("%s ≥ %.2f would need a to finish in %.2f s. What bounds it on this machine:", name, ceilingTarget, need)
	w("")
	ref := fmt.Sprintf("c's timed part is one statement on one core with its rows already inside PostgreSQL (its untimed COPY into the staging tables took %.2f s)", c.load.Seconds())
	if r.p2 != nil {
		ref = "c′ has the machine for PostgreSQL alone: its COPY and upserts, with nothing to decode or validate"
	}
	w("- **CPU.** Kafka, PostgreSQL and the pipeline share 2 cores. During a the pipeline process used %.1f s of CPU, PostgreSQL %.1f s and Kafka %.1f s: even perfectly spread over both cores that is %.2f s, so %s ≤ %.2f with this much work. %s.",
		a.cpu.Seconds(), pg.Seconds(), kafka.Seconds(), floor, name, target.Seconds()/floor, ref)
	ceil := (c.total() + c.load).Seconds()
	if pg.Seconds() <= 1.5*ceil {
		w("- **PostgreSQL's share** (%.1f s, against c's %.2f s timed + %.2f s untimed COPY for the same final rows) is close to the ceiling: the coalescing window writes each key once per window, and a batch of new keys is COPYed straight into the table (no staging, no speculative insertion).",
			pg.Seconds(), c.total().Seconds(), c.load.Seconds())
	} else {
		w("- **PostgreSQL's share** (%.1f s) is %.1f × c's timed + untimed work for the final rows (%.2f s): the sink wrote rows more than once (see the upsert count above) or through the staging table.",
			pg.Seconds(), pg.Seconds()/ceil, ceil)
	}
	w("- **The pipeline's share** is the rest: per record, fetching and decompressing the Kafka batch, scanning the JSON envelope, the 14 rules, building and merging the row, dead-lettering the invalid tenth (a produce with 9 headers each), and at the end encoding the rows for COPY; plus the Go garbage collector, which marks the window's rows (live heap) on every cycle. `SILVER_ARGS=--profile` writes its CPU and allocation profiles. For %s ≥ %.2f all of it together would have to fit in about %.1f s of CPU for %d records (%.1f µs per record) next to PostgreSQL's share; it takes %.1f µs.",
		name, ceilingTarget, max(0, 2*need-pg.Seconds()-kafka.Seconds()), r.cfg.n, 1e6*max(0, 2*need-pg.Seconds()-kafka.Seconds())/float64(r.cfg.n), 1e6*a.cpu.Seconds()/float64(r.cfg.n))
	w("")
}

// ceilingTarget is the a/c′ target: sluice at 85 % of the full ingest
// ceiling or better.
const ceilingTarget = 0.85
