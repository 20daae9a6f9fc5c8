package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// checkTimeout validates a command's --timeout before the command connects
// anywhere: a limit of zero or less would fail the operation at once with
// a bare "context deadline exceeded".
func checkTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("invalid --timeout %v (want > 0)", d)
	}
	return nil
}

// byteSize is a flag of a size in bytes: a number with an optional unit,
// case-insensitive: B; KB, MB, GB or K, M, G (powers of 1000); KiB, MiB,
// GiB or Ki, Mi, Gi (powers of 1024), so that a Kubernetes quantity such as
// 512Mi is valid.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Type() string { return "bytes" }

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// parseBytes parses a byteSize value.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.TrimSpace(t[i:])
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes with an optional unit (KiB, MiB, GiB, KB, MB, GB)", s)
	}
	mult := map[string]int64{
		"": 1, "B": 1,
		"KB": 1e3, "MB": 1e6, "GB": 1e9,
		"K": 1e3, "M": 1e6, "G": 1e9,
		"KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
	}[strings.ToUpper(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (want KiB, MiB, GiB, KB, MB or GB)", s, unit)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * mult, nil
}
