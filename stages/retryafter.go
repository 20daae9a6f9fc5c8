package stages

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRetryAfterHeader caps what ParseRetryAfter returns: a day.
const maxRetryAfterHeader = 24 * time.Hour

// ParseRetryAfter returns the wait an HTTP Retry-After header value asks
// for, relative to now: delay seconds or an HTTP date, at most a day. It is
// 0 when v is absent, unparsable or in the past. Stages that call HTTP
// services pass it to [Wait] or [RetryAfter].
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(min(max(s, 0), int64(maxRetryAfterHeader/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
