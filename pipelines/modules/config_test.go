package modules

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/stages/ratelimit"
)

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	ws, err := ParseRateLimit(DefaultRateLimit)
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.Window{{Size: time.Minute, Limit: 120}, {Size: time.Second, Limit: 5}}
	if len(ws) != 2 || ws[0] != want[0] || ws[1] != want[1] {
		t.Errorf("windows = %+v, want %+v", ws, want)
	}
	for _, bad := range []string{"", "1m", "1m:0", "x:3", "1ns:3", "1s:-1"} {
		if _, err := ParseRateLimit(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	c, err := Config{}.ApplyEnv(envOf(map[string]string{
		"MODULES_RATE_LIMIT": "10s:3", "MODULES_ERROR_COOLDOWN": "90s",
		"MODULES_SYNTHETIC_LATENCY": "5ms", "MODULES_SYNTHETIC_FAULTS": "GONE=not_found",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.RateLimit.Windows) != 1 || c.RateLimit.Windows[0] != (ratelimit.Window{Size: 10 * time.Second, Limit: 3}) {
		t.Errorf("windows = %+v", c.RateLimit.Windows)
	}
	if c.ErrorCooldown != 90*time.Second {
		t.Errorf("cooldown = %v", c.ErrorCooldown)
	}
	syn, ok := c.Source.(*Synthetic)
	if !ok || syn.cfg.Latency != 5*time.Millisecond || syn.cfg.Faults["GONE"].Kind != FaultNotFound {
		t.Errorf("source = %#v", c.Source)
	}

	c, err = Config{}.ApplyEnv(envOf(map[string]string{"MODULES_SOURCE": "uw", "UW_API_KEY": "sekrit-key", "UW_BASE_URL": "http://uw.example"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Source.(*UW); !ok {
		t.Errorf("MODULES_SOURCE=uw built %T", c.Source)
	}
	if _, err := (Config{}).ApplyEnv(envOf(map[string]string{"MODULES_SOURCE": "uw"})); err == nil || !strings.Contains(err.Error(), "UW_API_KEY") {
		t.Errorf("uw without a key: %v", err)
	}
	_, err = Config{}.ApplyEnv(envOf(map[string]string{"MODULES_SOURCE": "uw", "UW_API_KEY": "sekrit-key", "UW_BASE_URL": "ftp://x"}))
	if err == nil || strings.Contains(err.Error(), "sekrit-key") {
		t.Errorf("a bad base URL: %v (the key must never show)", err)
	}
	for _, bad := range []map[string]string{
		{"MODULES_SOURCE": "nope"}, {"MODULES_ERROR_COOLDOWN": "soon"}, {"MODULES_RATE_LIMIT": "1m"},
		{"MODULES_SYNTHETIC_FAULTS": "X=boom"}, {"MODULES_SYNTHETIC_LATENCY": "-1s"},
	} {
		if _, err := (Config{}).ApplyEnv(envOf(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	// Fields already set win over the environment.
	src := NewSynthetic(SyntheticConfig{})
	c, err = Config{Source: src, ErrorCooldown: time.Second}.ApplyEnv(envOf(map[string]string{"MODULES_SOURCE": "nope", "MODULES_ERROR_COOLDOWN": "1h"}))
	if err != nil || c.Source != src || c.ErrorCooldown != time.Second {
		t.Errorf("set fields replaced: %+v, %v", c, err)
	}
}

// The defaults: the declared names, the upstream policy, the rate limit.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.RefreshGroup != RefreshGroup || c.MirrorGroup != MirrorGroup || c.RefreshTopic != "modules.refresh" ||
		c.StateTopic != "modules.state" || c.DLQTopic != "modules.dlq" {
		t.Errorf("names: %+v", c)
	}
	if c.Retry.MaxAttempts != 5 || c.Retry.Initial != time.Second || c.Retry.Max != 30*time.Second ||
		c.UpstreamTimeout != 30*time.Second || c.ErrorCooldown != time.Minute || c.CatalogRefresh != time.Minute {
		t.Errorf("policy: %+v", c)
	}
	if len(c.RateLimit.Windows) != 2 || c.SourceName != "uw" || c.MemberID == "" || len(c.Analyzers) != 4 {
		t.Errorf("limiter, source, member, analyzers: %+v", c)
	}
}
