package faults

import "testing"

func TestServiceOf(t *testing.T) {
	for fault, want := range map[string]string{"redis": "redis", "postgres": "postgres", "minio": "minio", "broker": "kafka"} {
		if got, ok := ServiceOf(fault); !ok || got != want {
			t.Errorf("ServiceOf(%q) = %q, %t; want %q", fault, got, ok, want)
		}
	}
	for _, fault := range []string{"kill", "leader", "kafka", ""} {
		if got, ok := ServiceOf(fault); ok {
			t.Errorf("ServiceOf(%q) = %q: a fault that restarts no service", fault, got)
		}
	}
}
