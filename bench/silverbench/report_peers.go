package main

import (
	"fmt"
	"maps"
	"strings"
)

// Report sections of the peers (variants k and w, variant_peers.go).

// peerTargets are the acceptance ratios of a over each peer (records/s).
var peerTargets = map[string]float64{peerKStreams: 6, peerWatermill: 30}

// verifyPeers checks each measured peer's tables (row counts, and contents
// equal to c's expected rows, or to a's when c did not run) and dead
// letters (total and per reason/rule equal to the expected ones); a peer
// failing any of them is marked as differing and left out of the ratios.
func (r *results) verifyPeers(add func(name string, ok bool, info string, args ...any)) {
	p := r.p
	ref, refName := "c", "c (expected rows)"
	if _, ok := r.sums["c"]; !ok {
		ref, refName = "a", "a"
	}
	for _, pr := range r.peers {
		if pr.failure != "" {
			continue
		}
		check := func(what string, ok bool, info string, args ...any) {
			add(pr.name+": "+what, ok, info, args...)
			if !ok {
				pr.differs = append(pr.differs, what)
			}
		}
		s := r.sums[pr.name]
		check("row counts", s.ta.rows == int64(len(p.finalTA)) && s.sa.rows == int64(len(p.finalSA)),
			"ta_silver %d (want %d), sa_silver %d (want %d)", s.ta.rows, len(p.finalTA), s.sa.rows, len(p.finalSA))
		if sr, ok := r.sums[ref]; ok {
			check("contents = "+refName, s == sr, "ta sum %s vs %s; sa sum %s vs %s", s.ta.sum, sr.ta.sum, s.sa.sum, sr.sa.sum)
		}
		check("DLQ records", pr.dlqTotal == p.invalid() && maps.Equal(pr.dlq, p.dlq),
			"%d in its DLQ topic (want %d); per reason/rule equal: %v", pr.dlqTotal, p.invalid(), maps.Equal(pr.dlq, p.dlq))
	}
}

// counted reports whether pr's time may be used: it was measured and its
// output is the expected one.
func (pr *resultPeer) counted() bool { return pr.failure == "" && len(pr.differs) == 0 }

func (r *results) peerThroughput(w func(string, ...any)) {
	for _, pr := range r.peers {
		label := map[string]string{peerKStreams: "k. Kafka Streams peer", peerWatermill: "w. Watermill peer"}[pr.name]
		switch {
		case pr.failure != "":
			w("| %s | %s: **%s** | – | – |", label, pr.what, pr.failure)
		case !pr.counted():
			w("| %s | %s; separate process: start → its group's lag 0 | %.2f s | output differs (%s): not counted |",
				label, pr.what, pr.run.Seconds(), strings.Join(pr.differs, ", "))
		default:
			w("| %s | %s; separate process: start → its group's lag 0 (every record's effects durable, offsets committed) | %.2f s | **%s** |",
				label, pr.what, pr.run.Seconds(), fmtRate(r.cfg.n, pr.run))
		}
	}
}

func (r *results) peerResources(w func(string, ...any)) {
	for _, pr := range r.peers {
		if pr.failure != "" {
			continue
		}
		ready := ""
		if pr.ready > 0 {
			ready = fmt.Sprintf(" Start → RUNNING (JVM start, group join, assignment) took %.1f s of its %.1f s.", pr.ready.Seconds(), pr.run.Seconds())
		}
		w("%s: peak RSS (VmHWM) **%d MiB**, CPU %.1f s; load average %s at its start, %s at its end; machine CPU busy during %s: %.0f %%.%s CPU time by process: %s.",
			pr.name, pr.peakRSSKB/1024, pr.cpu.Seconds(), pr.load[0], pr.load[1], pr.name, 100*pr.machine, ready, pr.cpuSplit)
		w("")
	}
}

func (r *results) peerRatios(w func(string, ...any)) {
	if r.a == nil {
		return
	}
	for _, pr := range r.peers {
		target := peerTargets[pr.name]
		switch {
		case pr.failure != "":
			w("| a/%s | – (%s) | ≥ %.0f | %s |", pr.name, pr.failure, target, passMiss(false))
		case !pr.counted():
			w("| a/%s | – (output differs: not counted) | ≥ %.0f | %s |", pr.name, target, passMiss(false))
		default:
			v := pr.run.Seconds() / r.a.run.Seconds()
			w("| a/%s (records/s of a over %s's) | %.1f | ≥ %.0f | %s |", pr.name, pr.name, v, target, passMiss(v >= target))
			if r.a.cpu > 0 && pr.cpu > 0 {
				w("| a/%s by the process's own CPU time (%s %.1f s / a %.1f s; less sensitive to other jobs' load on the shared cores, PostgreSQL and Kafka not included) | %.1f | (information) | |",
					pr.name, pr.name, pr.cpu.Seconds(), r.a.cpu.Seconds(), pr.cpu.Seconds()/r.a.cpu.Seconds())
			}
		}
	}
}

func (r *results) peerDLQHeader() string {
	var b strings.Builder
	for _, pr := range r.peers {
		fmt.Fprintf(&b, " %s |", pr.name)
	}
	return b.String()
}

func (r *results) peerDLQCells(key string) string {
	var b strings.Builder
	for _, pr := range r.peers {
		if pr.failure != "" {
			b.WriteString(" – |")
			continue
		}
		fmt.Fprintf(&b, " %d |", pr.dlq[key])
	}
	return b.String()
}

// peerMethod describes the peers that ran (the Method section).
func (r *results) peerMethod(w func(string, ...any)) {
	for _, pr := range r.peers {
		switch pr.name {
		case peerKStreams:
			w("- **k** (`bench/silverpeers/kstreams`, built with Maven, run with `java -Xmx1g`): a Kafka Streams 4.4.0 application on the same bronze topic with its own application id (consumer group), DLQ topic and schema. A fixed-key processor applies a Java port of `silver.Decode` and the 14 rules (first failure wins; Jackson for the JSON), `split()` sends the dead letters, value unchanged, to its DLQ topic with the `dlq.reason`/`dlq.rule` headers, and the valid rows go to a processor that buffers them per key in a state store of its own (rows of one key merged as the upsert merges them); the store writes its buffer in one transaction of JDBC batches (`INSERT … ON CONFLICT DO UPDATE` with the silver sink's SET clause, `reWriteBatchedInserts=true`) when Kafka Streams flushes it before committing the task's offsets (every second) and when it holds 10 000 keys. 2 stream threads (2 cores), at least once. Its clock runs from the process start (JVM start and group join included, as a's process start is in a's) to its group's lag 0.")
		case peerWatermill:
			w("- **w** (`bench/silverpeers/watermill`, its own Go module so that Watermill and sarama stay out of sluice's go.mod): a Watermill v1.5.1 router with a watermill-kafka v3.0.6 subscriber (consumer group, oldest offset) and one handler call per message, which runs sluice's own `silver.Decode` and validator (same rules, only the framework differs) and writes a valid row with one single-row `INSERT … ON CONFLICT DO UPDATE` (the seed port's statement, the sink's SET clause) before the message is acked; a dead letter is returned as an error with `dlq.reason`/`dlq.rule` in its metadata and published by Watermill's poison queue middleware (`PoisonQueueWithFilter`, a synchronous sarama producer) to its DLQ topic. Offsets are auto-committed by sarama every second; its clock runs from the process start to its group's lag 0.")
		}
	}
}
