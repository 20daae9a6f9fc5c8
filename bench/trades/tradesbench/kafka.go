package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/trades"
)

// watermarkUser keys the records that close the last week: one
// digest.request per partition, an hour and a minute after the corpus's
// last week ends (past the 1 h grace), so that a stream-time implementation
// (Kafka Streams) closes every week. Digest implementations skip its
// (empty) digests; the checker ignores them.
const watermarkUser = "bench-watermark"

// produce creates topic and writes the corpus to it, week by week (every
// user's trades of week 1, then of week 2 …), each user's records in
// history order, keyed by user_id, with the trade's ts as the record
// timestamp; then the watermark records.
func produce(ctx context.Context, seeds []string, topic string, partitions int32, spec corpusSpec) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(20*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, partitions, 1, keepForever(), topic); err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}
	weeks := spec.weeks()
	byWeek := make([][]scoredRecord, len(weeks))
	total := 0
	for i := range spec.Users {
		recs, err := spec.userRecords(i)
		if err != nil {
			return err
		}
		for _, r := range recs {
			r.Payload = trades.TradeScored{} // the value carries it; keep memory down
			w := int(r.TS.Sub(spec.Start) / (7 * 24 * time.Hour))
			byWeek[w] = append(byWeek[w], r)
			total++
		}
	}
	t0 := time.Now()
	var mu sync.Mutex
	var firstErr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			firstErr = errors.Join(firstErr, err)
			mu.Unlock()
		}
	}
	for _, week := range byWeek {
		for _, r := range week {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(r.Key), Value: r.Value, Timestamp: r.TS}, done)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mark := weeks[len(weeks)-1].End.Add(time.Hour + time.Minute)
	next := weeks[len(weeks)-1].End.Format(time.DateOnly)
	value, err := json.Marshal(trades.Event[trades.DigestRequest]{
		EventID: "bench-watermark-" + next, Type: trades.TypeDigestRequest, Timestamp: mark,
		Payload: trades.DigestRequest{UserID: watermarkUser, PeriodStart: next},
	})
	if err != nil {
		return err
	}
	man, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer man.Close()
	for p := range partitions {
		man.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(watermarkUser), Value: value, Timestamp: mark}, done)
	}
	if err := man.Flush(ctx); err != nil {
		return err
	}
	if firstErr != nil {
		return fmt.Errorf("produce: %w", firstErr)
	}
	fmt.Printf(`{"topic":%q,"records":%d,"watermarks":%d,"seconds":%.1f}`+"\n", topic, total, partitions, time.Since(t0).Seconds())
	return nil
}

// keepForever turns off time-based retention: the corpus's timestamps are
// weeks old, older than a broker's default retention.
func keepForever() map[string]*string {
	return map[string]*string{"retention.ms": kadm.StringPtr("-1")}
}

// create creates topic with partitions partitions (replication 1), kept
// forever.
func create(ctx context.Context, seeds []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, keepForever(), topic); err != nil {
		return fmt.Errorf("create %s: %w", topic, err)
	}
	return nil
}

// endOffsets sums the end offsets of topic's partitions.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, ends.Error()
}

// waitFor polls topic's end offsets once a second until they sum to at
// least count, then prints the unix milliseconds of that poll.
func waitFor(ctx context.Context, seeds []string, topic string, count int64, timeout time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	return waitUntil(ctx, timeout, func(ctx context.Context) (bool, string) {
		n, err := endOffsets(ctx, adm, topic)
		return err == nil && n >= count, fmt.Sprintf("%s holds %d records, want %d (last error %v)", topic, n, count, err)
	})
}

// waitUntil calls probe once a second until it reports done, then prints
// the unix milliseconds of that call; after timeout it fails with probe's
// last description of the state.
func waitUntil(ctx context.Context, timeout time.Duration, probe func(context.Context) (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		done, state := probe(ctx)
		if done {
			fmt.Println(time.Now().UnixMilli())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", state, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// readAll reads topic from its start to its end offsets at the call and
// calls fn for every record, in each partition's order.
func readAll(ctx context.Context, seeds []string, topic string, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	end, err := endOffsets(ctx, kadm.NewClient(cl), topic)
	if err != nil {
		return err
	}
	var read int64
	for read < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %d of %d records: %w", topic, read, end, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			fn(r)
		})
	}
	return nil
}

// check reads topic (the digests, {user_id, period, agg} keyed anyhow) to
// its end and compares every digest of a corpus (user, week) with
// trades.Aggregate's: exactly, value by value (numbers and decimal strings
// as written; key order and spacing aside). Watermark digests are skipped.
func check(ctx context.Context, seeds []string, topic string, spec corpusSpec, timeout time.Duration) error {
	want, err := spec.expectedDigests()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got := map[string][]byte{}
	var read int64
	dups, watermarks := 0, 0
	err = readAll(ctx, seeds, topic, func(r *kgo.Record) {
		read++
		var d peerDigest
		if err := json.Unmarshal(r.Value, &d); err != nil {
			got[fmt.Sprintf("undecodable@%d/%d", r.Partition, r.Offset)] = r.Value
			return
		}
		if d.UserID == watermarkUser {
			watermarks++
			return
		}
		k := d.UserID + "|" + d.Period.Start
		if _, ok := got[k]; ok {
			dups++
		}
		got[k] = r.Value
	})
	if err != nil {
		return err
	}
	return compareDigests(want, got, fmt.Sprintf(`"read":%d,"duplicates":%d,"watermarks":%d`, read, dups, watermarks))
}

// compareDigests compares got with want (both keyed by digestKey), prints
// the counts (with extra, a JSON fragment of the reader's own counts) and
// fails unless every wanted digest matched and none is extra.
func compareDigests(want, got map[string][]byte, extraJSON string) error {
	matched, missing, extra := 0, 0, 0
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case sameJSON(g, w):
			matched++
		default:
			if len(diffs) < 3 {
				diffs = append(diffs, fmt.Sprintf("%s\n  want %s\n  got  %s", k, w, g))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra++
		}
	}
	mismatched := len(want) - matched - missing
	fmt.Printf(`{"expected":%d,"matched":%d,"mismatched":%d,"missing":%d,"extra":%d,%s}`+"\n",
		len(want), matched, mismatched, missing, extra, extraJSON)
	if matched != len(want) || extra > 0 {
		return fmt.Errorf("digests differ from trades.Aggregate:\n%s", strings.Join(diffs, "\n"))
	}
	return nil
}

// sameJSON compares two JSON documents value by value, numbers by their
// text.
func sameJSON(a, b []byte) bool {
	decode := func(b []byte) (any, bool) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, ok1 := decode(a)
	vb, ok2 := decode(b)
	return ok1 && ok2 && reflect.DeepEqual(va, vb)
}

// logSize prints the on-disk bytes of every topic named prefix*suffix
// (DescribeLogDirs, summed over brokers and partitions).
func logSize(ctx context.Context, seeds []string, prefix, suffix string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	dirs, err := kadm.NewClient(cl).DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return err
	}
	sizes := map[string]int64{}
	var total int64
	for _, d := range dirs {
		d.EachPartition(func(p kadm.DescribedLogDirPartition) {
			if strings.HasPrefix(p.Topic, prefix) && strings.HasSuffix(p.Topic, suffix) {
				sizes[p.Topic] += p.Size
				total += p.Size
			}
		})
	}
	out, _ := json.Marshal(map[string]any{"changelog_bytes": total, "topics": sizes})
	fmt.Println(string(out))
	return nil
}

// deleteTopics deletes every topic whose name starts with prefix (a run's
// topics: corpus, output, changelogs) and prints their names.
func deleteTopics(ctx context.Context, seeds []string, prefix string) error {
	if len(prefix) < 8 {
		return fmt.Errorf("--prefix %q is too short to name one run's topics", prefix)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range all.Names() {
		if strings.HasPrefix(t, prefix) {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return nil
	}
	resps, err := adm.DeleteTopics(ctx, names...)
	if err != nil {
		return err
	}
	if err := resps.Error(); err != nil {
		return err
	}
	fmt.Println(strings.Join(names, "\n"))
	return nil
}
