// Package sysload reads the machine's load averages, which every benchmark
// report records next to its figures.
package sysload

import (
	"os"
	"strings"
)

// Averages returns the 1, 5 and 15 minute load averages as
// /proc/loadavg's first three fields, or "?" where it cannot be read.
func Averages() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
