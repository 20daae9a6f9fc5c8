package modules

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultKind is a failure the Synthetic source injects.
type FaultKind string

// The fault kinds, as written in MODULES_SYNTHETIC_FAULTS.
const (
	// FaultTransient answers 503 (every call, or the first N calls of
	// each key: transient:N).
	FaultTransient FaultKind = "transient"
	// FaultNotFound answers 404: permanent, modules.upstream_rejected.
	FaultNotFound FaultKind = "not_found"
	// FaultRateLimited answers 429 with Retry-After D (rate_limited:D,
	// default 1s).
	FaultRateLimited FaultKind = "rate_limited"
	// FaultUnauthorized answers 401: fatal.
	FaultUnauthorized FaultKind = "unauthorized"
	// FaultLatency answers after D (latency:D), or when ctx ends first.
	FaultLatency FaultKind = "latency"
	// FaultTooLarge answers a payload one byte over MaxPayloadBytes.
	FaultTooLarge FaultKind = "too_large"
)

// Fault is one injected failure. Count, for FaultTransient, limits it to
// the first Count calls of each key (0: every call). Duration is the
// latency of FaultLatency and the Retry-After of FaultRateLimited.
type Fault struct {
	Kind     FaultKind
	Count    int
	Duration time.Duration
}

// Faults maps a target to its fault: a ticker (every module of it) or a
// key TICKER:module, which takes precedence.
type Faults map[string]Fault

// For returns the fault of ticker × module, if any.
func (f Faults) For(ticker, module string) (Fault, bool) {
	if fault, ok := f[Key(ticker, module)]; ok {
		return fault, true
	}
	fault, ok := f[NormalizeTicker(ticker)]
	return fault, ok
}

// ParseFaults parses MODULES_SYNTHETIC_FAULTS: comma-separated
// TARGET=KIND[:ARG] entries, e.g.
// "FAILX=transient,GONE=not_found,SLOWX=latency:30s,NVDA:dark_pool=transient:2".
// TARGET is a ticker (upper-cased) or TICKER:module; KIND one of
// transient[:N], not_found, rate_limited[:DURATION], unauthorized,
// latency:DURATION, too_large. Blank entries are ignored; an empty string
// is no faults. A target given twice is an error.
func ParseFaults(s string) (Faults, error) {
	out := Faults{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		target, spec, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("modules faults: %q is not TARGET=KIND", entry)
		}
		key, err := faultTarget(strings.TrimSpace(target))
		if err != nil {
			return nil, fmt.Errorf("modules faults: %q: %w", entry, err)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("modules faults: %s is given twice", key)
		}
		f, err := parseFault(strings.TrimSpace(spec))
		if err != nil {
			return nil, fmt.Errorf("modules faults: %q: %w", entry, err)
		}
		out[key] = f
	}
	return out, nil
}

// faultTarget checks a target and returns it normalised.
func faultTarget(target string) (string, error) {
	ticker, module, hasModule := SplitKey(target)
	t, err := CheckTicker(ticker)
	if err != nil {
		return "", fmt.Errorf("target ticker: %w", err)
	}
	if !hasModule {
		return t, nil
	}
	if err := CheckModule(module); err != nil {
		return "", fmt.Errorf("target module: %w", err)
	}
	return Key(t, module), nil
}

func parseFault(spec string) (Fault, error) {
	kind, arg, hasArg := strings.Cut(spec, ":")
	f := Fault{Kind: FaultKind(kind)}
	switch f.Kind {
	case FaultTransient:
		if hasArg {
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 {
				return Fault{}, fmt.Errorf("transient:N needs a count of at least 1, got %q", arg)
			}
			f.Count = n
		}
		return f, nil
	case FaultRateLimited, FaultLatency:
		if !hasArg {
			if f.Kind == FaultLatency {
				return Fault{}, fmt.Errorf("latency needs a duration (latency:30s)")
			}
			f.Duration = DefaultRateLimitWait
			return f, nil
		}
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return Fault{}, fmt.Errorf("%s: %q is not a positive duration", kind, arg)
		}
		f.Duration = d
		return f, nil
	case FaultNotFound, FaultUnauthorized, FaultTooLarge:
		if hasArg {
			return Fault{}, fmt.Errorf("%s takes no argument", kind)
		}
		return f, nil
	}
	return Fault{}, fmt.Errorf("unknown fault %q", kind)
}
