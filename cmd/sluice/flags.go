package main

import (
	"fmt"
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
