package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Inspect reads the DLQ topic from its start up to the end offsets captured
// when it is called (records appended later are not read, so it terminates;
// the end is the last stable offset, so records of a transaction still open
// then are not read, nor those of a transaction whose commit markers had
// not yet reached the partition) and calls fn with every record that matches f, at most limit of them
// (limit <= 0: no limit). Records come in offset order within a partition;
// partitions interleave. A record whose dlq.* headers are malformed is still
// passed on with the fields that parsed (see [Parse]); its raw headers are in
// Record.Headers. Inspect reads with a direct consumer: it joins no group
// and commits nothing. An error from fn stops the scan and is returned.
// When no record arrives for a while before every partition reached its
// end (a broker not answering), Inspect fails naming the partitions left
// short, after fn saw the records read until then.
func Inspect(ctx context.Context, opts []kgo.Opt, topic string, f Filter, limit int, fn func(Record) error) error {
	n := 0
	err := scan(ctx, opts, topic, func(kr *kgo.Record) error {
		r, _ := Parse(kr) // tolerant: malformed headers are visible in r.Headers
		if !f.Match(r) {
			return nil
		}
		if err := fn(r); err != nil {
			return err
		}
		n++
		if limit > 0 && n >= limit {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("dlq inspect %s: %w", topic, err)
	}
	return nil
}
