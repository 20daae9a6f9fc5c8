package stages_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

// DeadLetterWith dead-letters the input record and still emits outputs:
// here a job whose step failed for good moves to FAILED, and that state
// update is written while the runtime sends the record to the DLQ.
func ExampleDeadLetterWith() {
	step := stages.Func[string, string](func(_ context.Context, m stages.Msg[string]) ([]string, error) {
		if m.Value == "broken" {
			return stages.DeadLetterWith([]string{"job " + m.Key + ": FAILED"}, stages.ReasonRetriesExhausted, "", errors.New("source kept failing"))
		}
		return []string{"job " + m.Key + ": RUNNING"}, nil
	})
	for _, v := range []string{"fine", "broken"} {
		out, err := step(context.Background(), stages.Msg[string]{Key: "j1", Value: v})
		c := stages.Classify(err)
		if c == nil {
			fmt.Println(out)
			continue
		}
		fmt.Println(out, "and dead letter:", c.Reason, c.WithOutputs)
	}
	// Output:
	// [job j1: RUNNING]
	// [job j1: FAILED] and dead letter: retries_exhausted true
}

// Wait asks the runtime to call the stage again after a while without
// spending an attempt (a rate limit, an HTTP 429 with Retry-After); Retry
// spends one. Msg.Attempt numbers the calls and LastAttempt tells the stage
// that a retry error now dead-letters the record.
func ExampleWait() {
	call := stages.Func[string, string](func(_ context.Context, m stages.Msg[string]) ([]string, error) {
		switch {
		case m.Value == "throttled":
			return nil, stages.Wait(3*time.Second, errors.New("429 Too Many Requests"))
		case m.LastAttempt():
			return stages.DeadLetterWith([]string{"gave up"}, stages.ReasonRetriesExhausted, "", errors.New("503"))
		default:
			return nil, stages.Retry(errors.New("503"))
		}
	})
	for _, m := range []stages.Msg[string]{
		{Value: "throttled", Attempt: 1, MaxAttempts: 3},
		{Value: "flaky", Attempt: 2, MaxAttempts: 3},
		{Value: "flaky", Attempt: 3, MaxAttempts: 3},
	} {
		out, err := call(context.Background(), m)
		c := stages.Classify(err)
		fmt.Println(m.Value, m.Attempt, c.Kind == stages.KindWait, c.After, c.Kind == stages.KindRetry, out)
	}
	// Output:
	// throttled 1 true 3s false []
	// flaky 2 false 0s true []
	// flaky 3 false 0s false [gave up]
}

// A stage that made progress it need not redo carries it in its retry
// error; the runtime hands that error back at the next attempt in
// Msg.PrevErr (nil at the first attempt and after a redelivery).
func ExampleMsg_PrevErr() {
	type pending struct{ error }
	crawl := stages.Func[[]string, string](func(_ context.Context, m stages.Msg[[]string]) ([]string, error) {
		todo := m.Value
		var p *pending
		if errors.As(m.PrevErr, &p) {
			todo = strings.Fields(p.Error()) // what the previous attempt left
		}
		fmt.Println("attempt", m.Attempt, "crawls", todo)
		if m.Attempt == 1 {
			return nil, stages.Retry(&pending{errors.New(todo[len(todo)-1])})
		}
		return todo, nil
	})
	m := stages.Msg[[]string]{Value: []string{"a", "b", "c"}, Attempt: 1, MaxAttempts: 3}
	_, err := crawl(context.Background(), m)
	m.Attempt, m.PrevErr = 2, err // as the runtime does
	out, _ := crawl(context.Background(), m)
	fmt.Println(out)
	// Output:
	// attempt 1 crawls [a b c]
	// attempt 2 crawls [c]
	// [c]
}
