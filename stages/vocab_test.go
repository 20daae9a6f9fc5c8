package stages_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// Then passes the attempt, its bound and the previous error on to the
// second stage, and keeps the outputs of a DeadLetterWith (of either
// stage) with its error, while any other error drops them.
func TestThenCarriesAttemptsAndDeadLetterOutputs(t *testing.T) {
	t.Parallel()
	prev := errors.New("previous attempt")
	in := stages.Msg[string]{Key: "k", Value: "x", Attempt: 2, MaxAttempts: 4, PrevErr: prev}
	for _, tc := range []struct {
		name       string
		first      stages.Func[string, string]
		second     stages.Func[string, string]
		wantOut    []string
		wantKind   stages.Kind
		wantReason stages.Reason
		wantErr    bool
	}{
		{
			name: "no error",
			first: func(_ context.Context, m stages.Msg[string]) ([]string, error) {
				return []string{m.Value + "1", m.Value + "2"}, nil
			},
			second:  func(_ context.Context, m stages.Msg[string]) ([]string, error) { return []string{m.Value + "!"}, nil },
			wantOut: []string{"x1!", "x2!"},
		},
		{
			name: "dead letter with outputs in first",
			first: func(_ context.Context, m stages.Msg[string]) ([]string, error) {
				return stages.DeadLetterWith([]string{"state"}, stages.ReasonSanityFail, "r", errors.New("bad"))
			},
			second:     func(_ context.Context, m stages.Msg[string]) ([]string, error) { return []string{m.Value + "!"}, nil },
			wantOut:    []string{"state!"},
			wantKind:   stages.KindDeadLetter,
			wantReason: stages.ReasonSanityFail,
			wantErr:    true,
		},
		{
			name:  "dead letter with outputs in second",
			first: func(_ context.Context, m stages.Msg[string]) ([]string, error) { return []string{"a", "b", "c"}, nil },
			second: func(_ context.Context, m stages.Msg[string]) ([]string, error) {
				if m.Value == "b" {
					return stages.DeadLetterWith([]string{"b-failed"}, stages.ReasonException, "", errors.New("b"))
				}
				return []string{m.Value + "!"}, nil
			},
			wantOut:    []string{"a!", "b-failed"},
			wantKind:   stages.KindDeadLetter,
			wantReason: stages.ReasonException,
			wantErr:    true,
		},
		{
			name: "plain dead letter drops outputs",
			first: func(_ context.Context, m stages.Msg[string]) ([]string, error) {
				return []string{"ignored"}, stages.DeadLetter(stages.ReasonSanityFail, "", errors.New("bad"))
			},
			second:     func(_ context.Context, m stages.Msg[string]) ([]string, error) { return []string{m.Value}, nil },
			wantKind:   stages.KindDeadLetter,
			wantReason: stages.ReasonSanityFail,
			wantErr:    true,
		},
		{
			name:  "retry in second drops outputs",
			first: func(_ context.Context, m stages.Msg[string]) ([]string, error) { return []string{"a", "b"}, nil },
			second: func(_ context.Context, m stages.Msg[string]) ([]string, error) {
				return []string{m.Value}, stages.Wait(0, errors.New("later"))
			},
			wantKind: stages.KindWait,
			wantErr:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen []string
			second := func(ctx context.Context, m stages.Msg[string]) ([]string, error) {
				seen = append(seen, fmt.Sprint(m.Key, m.Attempt, m.MaxAttempts, m.LastAttempt(), errors.Is(m.PrevErr, prev)))
				return tc.second(ctx, m)
			}
			out, err := stages.Then(tc.first, second)(context.Background(), in)
			if !slices.Equal(out, tc.wantOut) {
				t.Errorf("outputs %q, want %q", out, tc.wantOut)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %t", err, tc.wantErr)
			}
			if c := stages.Classify(err); err != nil && (c.Kind != tc.wantKind || c.Reason != tc.wantReason) {
				t.Errorf("error %v: kind %d reason %q, want %d %q", err, c.Kind, c.Reason, tc.wantKind, tc.wantReason)
			}
			for _, s := range seen {
				if s != "k2 4 false true" {
					t.Errorf("second saw key, attempt, max, last, prev = %q, want %q", s, "k2 4 false true")
				}
			}
		})
	}
}

// LastAttempt is true from MaxAttempts on, and never when MaxAttempts is
// unknown.
func TestLastAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt, max int
		want         bool
	}{{1, 1, true}, {1, 3, false}, {3, 3, true}, {4, 3, true}, {5, 0, false}, {0, 0, false}} {
		if got := (stages.Msg[int]{Attempt: tc.attempt, MaxAttempts: tc.max}).LastAttempt(); got != tc.want {
			t.Errorf("attempt %d of %d: LastAttempt %t, want %t", tc.attempt, tc.max, got, tc.want)
		}
	}
}

// The error texts of the new kinds say what the runtime will do.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	_, dl := stages.DeadLetterWith([]int{1}, stages.ReasonSanityFail, "r.x", errors.New("bad"))
	for err, want := range map[error]string{
		stages.Wait(1500*time.Millisecond, errors.New("429")): "wait 1.5s: 429",
		dl: "dead-letter sanity_fail (rule r.x): bad",
	} {
		if err.Error() != want {
			t.Errorf("%q, want %q", err.Error(), want)
		}
	}
}
