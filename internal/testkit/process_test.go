package testkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

const childEnv = "SLUICE_TESTKIT_TEST_CHILD"

func TestMain(m *testing.M) {
	RunChild(childEnv, func(spec string) int {
		var s struct{ Marker string }
		if err := json.Unmarshal([]byte(spec), &s); err != nil {
			return 2
		}
		fmt.Println("child running")
		if err := os.WriteFile(s.Marker, []byte("up"), 0o644); err != nil {
			return 2
		}
		time.Sleep(time.Hour) // until killed
		return 0
	})
	os.Exit(m.Run())
}

// StartChild runs the test binary's child function with the spec; Kill
// ends it with SIGKILL, after which it has exited, killed.
func TestStartChildAndKill(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "marker")
	c := StartChild(t, childEnv, map[string]string{"Marker": marker})
	WaitFor(t, 30*time.Second, "the child to start", func() bool {
		b, err := os.ReadFile(marker)
		return err == nil && string(b) == "up"
	})
	if c.Exited() || c.Err() != nil {
		t.Fatalf("child exited (%v) before the kill", c.Err())
	}
	c.Kill(t)
	var exit *exec.ExitError
	if !c.Exited() || !errors.As(c.Err(), &exit) || exit.Exited() {
		t.Errorf("after Kill: exited %v, err %v; want a process ended by a signal", c.Exited(), c.Err())
	}
}
