package silver

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages/run"
)

// The coalescing window's defaults and how negative values switch its
// bounds off.
func TestWindowDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   run.WindowConfig
		want run.WindowConfig
	}{
		{"zero takes every default", run.WindowConfig{},
			run.WindowConfig{MaxKeys: DefaultWindowMaxKeys, MaxAge: DefaultWindowMaxAge, MaxTotalKeys: DefaultWindowMaxTotalKeys}},
		{"explicit values are kept", run.WindowConfig{MaxKeys: 20, MaxAge: time.Second, MaxTotalKeys: 50},
			run.WindowConfig{MaxKeys: 20, MaxAge: time.Second, MaxTotalKeys: 50}},
		{"negative MaxKeys turns windows off", run.WindowConfig{MaxKeys: -1, MaxTotalKeys: 50},
			run.WindowConfig{}},
		{"negative MaxTotalKeys lifts the process bound", run.WindowConfig{MaxTotalKeys: -1},
			run.WindowConfig{MaxKeys: DefaultWindowMaxKeys, MaxAge: DefaultWindowMaxAge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Config{Runtime: run.Config{Window: tc.in}}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			if c.Runtime.Window != tc.want {
				t.Errorf("Window = %+v, want %+v", c.Runtime.Window, tc.want)
			}
			if err := c.Runtime.Validate(); err != nil {
				t.Errorf("defaults do not validate: %v", err)
			}
		})
	}
}
