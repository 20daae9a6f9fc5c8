package main

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/stages"
)

// recordTime is the timestamp of record i: t0 + i ms. It is the Kafka
// record timestamp (variant a) and task_q.first_seen (variant b); the
// validator uses it as the fallback ta first_seen_time, so both variants
// compute the same rows, and the seed's ORDER BY first_seen follows the
// corpus order. t0 is recent (the run's start minus N ms and a minute):
// Kafka applies time retention to record timestamps, so old ones would be
// deleted under the pipeline's feet.
func (p *prepared) recordTime(i int) time.Time { return p.t0.Add(time.Duration(i) * time.Millisecond) }

// prepared is the corpus with everything the variants and the checks need:
// the verdict of every record and the final table contents (rows merged per
// key in corpus order with silver.MergeTA/MergeSA, i.e. what the tables must
// hold after every record was applied once in order).
type prepared struct {
	recs     []silver.Record
	t0       time.Time
	valid    int
	validTA  int
	validSA  int
	dlq      map[string]int // "reason rule" → records
	finalTA  []silver.TARow // in key order
	finalSA  []silver.SARow // in key order
	mismatch int            // verdicts that differ from the corpus's WantReason/WantRule
	genTime  time.Duration
}

func dlqKey(reason stages.Reason, rule string) string { return string(reason) + " " + rule }

// prepare generates n records from seed (10 % invalid) and computes the
// expected outcome with the pipeline's own Decode and validator.
func prepare(seed int64, n int, invalid float64) (*prepared, error) {
	start := time.Now()
	p := &prepared{recs: silver.GenerateCorpus(seed, n, invalid), dlq: map[string]int{},
		t0: start.Truncate(time.Millisecond).Add(-time.Duration(n)*time.Millisecond - time.Minute)}
	v := silver.NewValidator()
	ta := map[string]*silver.TARow{}
	sa := map[string]*silver.SARow{}
	// Validate in parallel (the validator is safe for concurrent use), fold
	// in order.
	rows := make([]silver.Row, len(p.recs))
	errs := make([]error, len(p.recs))
	var wg sync.WaitGroup
	workers := runtime.NumCPU()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(p.recs); i += workers {
				env, err := silver.Decode([]byte(p.recs[i].Key), p.recs[i].Value)
				if err == nil {
					rows[i], err = v.Transform(env, p.recordTime(i))
				}
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for i, rec := range p.recs {
		row, err := rows[i], errs[i]
		if err != nil {
			c := stages.Classify(err)
			if c.Kind != stages.KindDeadLetter {
				return nil, fmt.Errorf("record %d: unexpected error kind: %w", i, err)
			}
			p.dlq[dlqKey(c.Reason, c.Rule)]++
			if c.Reason != rec.WantReason || c.Rule != rec.WantRule {
				p.mismatch++
			}
			continue
		}
		if rec.WantReason != "" {
			p.mismatch++
		}
		p.valid++
		switch {
		case row.TA != nil:
			p.validTA++
			k := row.TA.Key()
			if old, ok := ta[k]; ok {
				m := silver.MergeTA(*old, *row.TA)
				ta[k] = &m
			} else {
				ta[k] = row.TA
			}
		case row.SA != nil:
			p.validSA++
			k := row.SA.Key()
			if old, ok := sa[k]; ok {
				m := silver.MergeSA(*old, *row.SA)
				sa[k] = &m
			} else {
				sa[k] = row.SA
			}
		}
	}
	for _, k := range sortedKeys(ta) {
		p.finalTA = append(p.finalTA, *ta[k])
	}
	for _, k := range sortedKeys(sa) {
		p.finalSA = append(p.finalSA, *sa[k])
	}
	p.genTime = time.Since(start)
	return p, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (p *prepared) invalid() int { return len(p.recs) - p.valid }
