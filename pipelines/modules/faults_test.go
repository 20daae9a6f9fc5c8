package modules

import (
	"strings"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	t.Parallel()
	f, err := ParseFaults(" FAILX=transient, gone=not_found,SLOWX=latency:30s,NVDA:dark_pool=transient:2,RL=rate_limited:5s,RL2=rate_limited,AUTH=unauthorized,BIG=too_large,")
	if err != nil {
		t.Fatal(err)
	}
	want := Faults{
		"FAILX":          {Kind: FaultTransient},
		"GONE":           {Kind: FaultNotFound},
		"SLOWX":          {Kind: FaultLatency, Duration: 30 * time.Second},
		"NVDA:dark_pool": {Kind: FaultTransient, Count: 2},
		"RL":             {Kind: FaultRateLimited, Duration: 5 * time.Second},
		"RL2":            {Kind: FaultRateLimited, Duration: DefaultRateLimitWait},
		"AUTH":           {Kind: FaultUnauthorized},
		"BIG":            {Kind: FaultTooLarge},
	}
	if len(f) != len(want) {
		t.Errorf("faults = %v", f)
	}
	for k, w := range want {
		if f[k] != w {
			t.Errorf("%s = %+v, want %+v", k, f[k], w)
		}
	}
	if empty, err := ParseFaults(""); err != nil || len(empty) != 0 {
		t.Errorf("empty = %v, %v", empty, err)
	}

	for _, bad := range []string{
		"FAILX",                   // no kind
		"FAILX=explode",           // unknown kind
		"FAILX=transient:0",       // count below 1
		"FAILX=transient:x",       // not a count
		"SLOWX=latency",           // no duration
		"SLOWX=latency:soon",      // not a duration
		"SLOWX=latency:-1s",       // negative
		"GONE=not_found:1",        // no argument taken
		"1BAD=transient",          // not a ticker
		"NVDA:Dark=transient",     // not a module
		"A=transient,a=not_found", // twice, once in lower case
	} {
		if _, err := ParseFaults(bad); err == nil {
			t.Errorf("ParseFaults(%q) accepted", bad)
		} else if !strings.HasPrefix(err.Error(), "modules faults: ") {
			t.Errorf("ParseFaults(%q): %v", bad, err)
		}
	}
}

func TestFaultsFor(t *testing.T) {
	t.Parallel()
	f := Faults{"NVDA": {Kind: FaultNotFound}, "NVDA:dark_pool": {Kind: FaultTransient}}
	if got, ok := f.For("nvda", ModuleDarkPool); !ok || got.Kind != FaultTransient {
		t.Errorf("key fault = %+v, %v", got, ok)
	}
	if got, ok := f.For("NVDA", ModuleOptionsFlow); !ok || got.Kind != FaultNotFound {
		t.Errorf("ticker fault = %+v, %v", got, ok)
	}
	if _, ok := f.For("AAPL", ModuleDarkPool); ok {
		t.Error("fault for an unlisted ticker")
	}
}
