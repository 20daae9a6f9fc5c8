package main

import (
	"bytes"
	"strings"
	"testing"
)

// Two parallel tests interleave their output: in the plain log the line
// before "--- SKIP: TestA" is TestB's, which the old grep -B1 printed as
// TestA's reason. The JSON events name each line's test.
func TestSkipReasonsSurviveInterleaving(t *testing.T) {
	in := []string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== PAUSE TestA\n"}`,
		`{"Action":"run","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== CONT  TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: no de_DE locale on this machine\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: testkit: Kafka (kfake) at 127.0.0.1:1\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:7: got 1, want 2\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"run","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"pass","Package":"p","Test":"TestD"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}`,
		`{"Action":"fail","Package":"p"}`,
		`# q`,
		`q/x.go:3:1: undefined: y`,
	}
	s := newSummary()
	var log, out bytes.Buffer
	for _, l := range in {
		s.add(l, &log)
	}
	s.write(&out)
	got := out.String()
	for _, want := range []string{
		"FAIL\tp\t0.01s\n",
		"Skipped tests (with reasons):\n  p TestA: a_test.go:9: no de_DE locale on this machine\n  p TestC: (no reason given)\n",
		"  --- FAIL p TestB\n      b_test.go:3: testkit: Kafka (kfake) at 127.0.0.1:1\n      b_test.go:7: got 1, want 2\n",
		"  q/x.go:3:1: undefined: y\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestA: b_test.go") || strings.Count(got, "no de_DE locale") != 1 {
		t.Errorf("TestB's output was taken for TestA's reason:\n%s", got)
	}
	if c := s.counts(); c != "1 passed, 1 failed, 2 skipped" {
		t.Errorf("counts %q", c)
	}
	if !strings.Contains(log.String(), "=== RUN   TestA\n=== PAUSE TestA\n") || !strings.Contains(log.String(), "--- FAIL: TestB (0.00s)\n--- SKIP: TestC (0.00s)\nFAIL\tp\t0.01s\n# q\n") {
		t.Errorf("plain log:\n%s", log.String())
	}
}
