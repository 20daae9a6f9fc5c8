package stages_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
)

// A stage is a typed function from one message to zero or more outputs. Its
// errors tell the runtime what to do: dead-letter with a reason and rule,
// retry later, or stop.
func ExampleFunc() {
	parse := stages.Func[string, int](func(_ context.Context, m stages.Msg[string]) ([]int, error) {
		n, err := strconv.Atoi(m.Value)
		if err != nil {
			return nil, stages.DeadLetter(stages.ReasonSanityFail, "num.integer", err)
		}
		return []int{n}, nil
	})
	double := stages.Map(func(n int) int { return 2 * n })
	pipeline := stages.Then(parse, double)

	for _, v := range []string{"21", "x"} {
		out, err := pipeline(context.Background(), stages.Msg[string]{Key: "k", Value: v})
		if c := stages.Classify(err); c != nil {
			fmt.Println(v, "→", c.Reason, c.Rule)
			continue
		}
		fmt.Println(v, "→", out)
	}
	// Output:
	// 21 → [42]
	// x → sanity_fail num.integer
}

// Errors that are not classified are retried; RetryAfter asks the runtime to
// pause the partition for at least the given wait.
func ExampleClassify() {
	for _, err := range []error{
		errors.New("connection reset"),
		stages.RetryAfter(2*time.Second, errors.New("rate limited")),
		stages.Fatal(errors.New("schema mismatch")),
	} {
		c := stages.Classify(err)
		fmt.Println(c.Kind == stages.KindRetry, c.After, c.Kind == stages.KindFatal)
	}
	// Output:
	// true 0s false
	// true 2s false
	// false 0s true
}

// A sink writes whole batches. Returning *stages.Rejections names the items
// the backend refused permanently: the runtime dead-letters their source
// records (reason sink_rejected) and treats the rest of the batch as written.
func ExampleSink() {
	sink := memsink.New(memsink.WithFailure(func(batch []int, _ int) error {
		var rej stages.Rejections
		for i, v := range batch {
			if v < 0 {
				rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: "pg.23514", Err: errors.New("check constraint")})
			}
		}
		if len(rej.Items) > 0 {
			return &rej
		}
		return nil
	}))
	var s stages.Sink[int] = sink
	err := s.Write(context.Background(), []int{1, -2, 3})
	fmt.Println(err)
	fmt.Println(sink.Items())
	// Output:
	// 1 item(s) rejected; #1: check constraint
	// [1 3]
}
