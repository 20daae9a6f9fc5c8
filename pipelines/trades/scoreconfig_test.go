package trades

import (
	"strings"
	"testing"
	"time"
)

// The environment fills the settings left zero; an invalid value is an
// error naming the variable and never quoting the secret.
func TestScoreDigestEnv(t *testing.T) {
	env := map[string]string{
		"AI_BASE_URL": "http://coach:8080", "AI_HMAC_KEY_ID": "k1", "AI_HMAC_SECRET": "s3cret-value", "AI_TIMEOUT_MS": "1500",
		"TRADES_DIGEST_GRACE": "2h", "TRADES_DIGEST_SETTLE": "45s",
	}
	s, d, err := scoreDigestEnv(ScoreConfig{}, DigestConfig{Horizon: time.Hour}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.Coach.BaseURL != "http://coach:8080" || s.Coach.KeyID != "k1" || s.Coach.Secret != "s3cret-value" || s.Coach.Timeout != 1500*time.Millisecond {
		t.Errorf("coach %+v", s.Coach)
	}
	if d.Grace != 2*time.Hour || d.Settle != 45*time.Second || d.Horizon != time.Hour {
		t.Errorf("digest grace %v settle %v horizon %v (an explicit horizon wins)", d.Grace, d.Settle, d.Horizon)
	}
	if d = d.withDefaults(); d.Tick != DefaultDigestTick {
		t.Errorf("tick %v", d.Tick)
	}
	for name, v := range map[string]string{"AI_TIMEOUT_MS": "2s", "TRADES_DIGEST_HORIZON": "-1h", "TRADES_DIGEST_SETTLE": "soon"} {
		bad := map[string]string{"AI_HMAC_SECRET": "s3cret-value", name: v}
		_, _, err := scoreDigestEnv(ScoreConfig{}, DigestConfig{}, func(k string) string { return bad[k] })
		if err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s=%s: %v", name, v, err)
		}
	}
}
