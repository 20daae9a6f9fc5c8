package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/kconf"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/memsink"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// memberEnv, when set, turns the test binary into a group member with a
// tally store and keyed timers, configured by the JSON memberSpec in its
// value (see TestMain), so that a member can be killed with SIGKILL.
const memberEnv = "SLUICE_RUN_TEST_STATE_MEMBER"

func TestMain(m *testing.M) {
	testkit.RunChild(memberEnv, stateMember)
	testkit.RunChild(dlqMemberEnv, dlqMember)
	testkit.RunChild(eventMemberEnv, eventMember)
	os.Exit(m.Run())
}

// memberSpec is what a member process needs. It may hold credentials:
// never log it.
type memberSpec struct {
	Kafka                   kconf.Config
	Input, Changelog, Group string
	DLQ                     string
	PerKey                  int
	Delay                   time.Duration // per record, so that the member can be killed mid-run
}

// killConfig is the runner config of the kill tests' members.
func killConfig(s memberSpec) run.Config {
	return run.Config{Name: "state-kill", Group: s.Group, Topics: []string{s.Input}, DLQTopic: s.DLQ,
		BatchMaxRecords: 20, BatchLinger: 5 * time.Millisecond, CommitInterval: 100 * time.Millisecond, RevokeTimeout: 5 * time.Second}
}

// killOpts are the client options of the kill tests' members: a short
// session, so that the group notices a killed member within 6 s.
func killOpts(kopts []kgo.Opt) []kgo.Opt {
	return append(kopts, kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))
}

// killStage is tallyTimerStage slowed down by delay per record.
func killStage(store *run.Store[keyTally], perKey int, delay time.Duration) stages.Func[string, msg] {
	tally := tallyTimerStage(store, perKey)
	return func(ctx context.Context, m msg) ([]msg, error) {
		time.Sleep(delay)
		return tally(ctx, m)
	}
}

// stateMember runs one member from the spec until SIGTERM (or SIGKILL).
func stateMember(specJSON string) int {
	var spec memberSpec
	return runChildMember("state member", specJSON, &spec, func() (kconf.Config, func(kopts []kgo.Opt) (runnable, error)) {
		return spec.Kafka, func(kopts []kgo.Opt) (runnable, error) {
			store, err := run.NewStore(run.StoreConfig[keyTally]{Name: "tallies", Topic: spec.Changelog, Encode: encodeJSON[keyTally], Decode: decodeJSON[keyTally]})
			if err != nil {
				return nil, fmt.Errorf("store: %w", err)
			}
			return run.New(killConfig(spec), decodeString, killStage(store, spec.PerKey, spec.Delay), memsink.New(memsink.CountOnly[msg]()),
				run.WithKafkaOpts(killOpts(kopts)...), run.WithStores(store), run.WithTimers(0, countFirings(store)), childLogger())
		}
	})
}

// runnable is a runner as a child member runs it.
type runnable interface{ Run(context.Context) error }

// childLogger logs a child member's warnings and errors to its stderr,
// which the test's log shows.
func childLogger() run.Option {
	return run.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// runChildMember decodes specJSON into spec, then builds a runner with
// the Kafka options of the config that decoded returns and runs it until
// SIGTERM (or SIGKILL); it returns the process's exit code.
func runChildMember(name, specJSON string, spec any, decoded func() (kconf.Config, func(kopts []kgo.Opt) (runnable, error))) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, what, err)
		return 2
	}
	if err := json.Unmarshal([]byte(specJSON), spec); err != nil {
		return fail("decode spec", errors.New("invalid JSON")) // the spec may hold secrets
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, build := decoded()
	kopts, err := cfg.Opts()
	if err != nil {
		return fail("kafka options", err)
	}
	r, err := build(kopts)
	if err != nil {
		return fail("runner", err)
	}
	if err := r.Run(ctx); err != nil {
		return fail("run", err)
	}
	return 0
}

// A member killed with SIGKILL mid-run (no revoke, no commit, no leave)
// loses nothing: the member that takes its partitions over — one started
// after the kill, or one that ran beside it all along — restores the
// state the killed member produced, the timers it set and had not fired
// (or had fired without their state committed) fire there, and in the end
// every key's count is exact and its timer's firing is counted exactly
// once in its state.
func TestStateSurvivesKill9(t *testing.T) {
	t.Parallel()
	for _, beside := range []bool{false, true} {
		name := map[bool]string{false: "alone", true: "beside a live member"}[beside]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewKafka(t, testkit.FakeOK())
			const keys, perKey = 30, 40
			spec := memberSpec{
				Kafka: k.Config, Group: testkit.Name(t, "g"),
				Input:     k.Topic(t, "in", 3),
				Changelog: k.Topic(t, "state", 3, compacted),
				DLQ:       k.Topic(t, "dlq", 1),
				PerKey:    perKey, Delay: 5 * time.Millisecond,
			}
			adm := k.Admin(t)
			recs := produce(t, k.Client(t), spec.Input, keys*perKey, keys, nil)
			committed := func() int64 { return sum(testkit.Committed(t, adm, spec.Group, spec.Input)) }

			store := newKeyTallies(t, spec.Changelog, nil)
			sink := memsink.New[msg]()
			startLocal := func() func() error {
				r, err := run.New(killConfig(spec), decodeString, killStage(store, perKey, spec.Delay), sink,
					run.WithKafkaOpts(killOpts(k.Opts(t))...), run.WithStores(store), run.WithTimers(0, countFirings(store)))
				if err != nil {
					t.Fatal(err)
				}
				return testkit.RunInBackground(t, "runner", r.Run)
			}
			a := testkit.StartChild(t, memberEnv, spec)
			var stop func() error
			if beside {
				stop = startLocal()
			}
			testkit.WaitFor(t, 60*time.Second, "a quarter of the records committed", func() bool {
				return committed() >= int64(len(recs)/4) && (!beside || sink.Len() > 0)
			})
			a.Kill(t)
			if c := committed(); c >= int64(len(recs)) {
				t.Fatalf("every record was committed (%d) before the kill", c)
			}
			if !beside {
				stop = startLocal()
			}
			testkit.WaitFor(t, 120*time.Second, "every record committed and every timer's firing in the state", func() bool {
				if committed() != int64(len(recs)) {
					return false
				}
				got, err := newKeyTallies(t, spec.Changelog, nil).Read(testkit.Context(t), k.Opts(t), nil)
				if err != nil {
					t.Fatal(err)
				}
				fired := 0
				for _, byKey := range got {
					for _, c := range byKey {
						fired += min(c.Fired, 1)
					}
				}
				return fired == keys
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			checkTallies(t, k, newKeyTallies(t, spec.Changelog, nil), wantTallies(recs), 1)
		})
	}
}
