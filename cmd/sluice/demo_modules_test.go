package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// checkModulesDemo checks the modules part of a finished demo's output:
// the summary counts one upstream call for the stampede of 50 requests,
// one module served and three missing whose job ended done. With an ops
// server, the printed assemble hint, POSTed as printed, answers the
// ticker's modules and creates their job.
func checkModulesDemo(t *testing.T, text string, withOps bool) {
	t.Helper()
	for _, row := range []string{
		`modules\s+refresh requests of DEMO[A-Z0-9]+:options_flow\s+50\n`,
		`modules\s+upstream calls for them\s+1\n`,
		`modules\s+assemble DEMO[A-Z0-9]+: modules served\s+1\n`,
		`modules\s+assemble DEMO[A-Z0-9]+: modules missing\s+3\n`,
		`modules\s+job [0-9a-f-]{36} modules \(done\)\s+3\n`,
	} {
		if !regexp.MustCompile(row).MatchString(text) {
			t.Errorf("the summary lacks a row matching %q:\n%s", row, text)
		}
	}
	hint := regexp.MustCompile(`curl -s -XPOST (http://\S+/api/v1/modules/analysis) -H '([^:']+): ([^']+)' -d '(.*)'`).FindStringSubmatch(text)
	if !withOps {
		if hint != nil {
			t.Errorf("ops server disabled, yet an assemble hint: %s", hint[0])
		}
		return
	}
	if hint == nil {
		t.Fatalf("no assemble hint:\n%s", text)
	}
	req, err := http.NewRequest(http.MethodPost, hint[1], strings.NewReader(hint[4]))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(hint[2], hint[3])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST the assemble hint: %v", err)
	}
	defer resp.Body.Close()
	var a struct {
		Ticker  string   `json:"ticker"`
		Missing []string `json:"missing"`
		Job     *struct {
			Created bool `json:"created"`
		} `json:"job"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("assemble hint: %s (%v)", resp.Status, err)
	}
	if a.Ticker != "NVDA" || len(a.Missing) != 4 || a.Job == nil || !a.Job.Created {
		t.Errorf("assemble hint answered %+v (job %+v), want NVDA with 4 modules missing and a job created", a, a.Job)
	}
}
