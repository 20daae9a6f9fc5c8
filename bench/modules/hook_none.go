//go:build !modulesservices

package main

import (
	"context"
	"errors"
)

// errSluiceNotBuilt is startSluice's answer while the modules-refresh and
// modules-mirror services are not in this tree.
var errSluiceNotBuilt = errors.New("the modules-refresh and modules-mirror services are not in this tree: build with -tags modulesservices once they are (hook_services.go)")

// startSluice is the hook of variant (ii); see hook_services.go for the
// version that starts the services. This one reports errSluiceNotBuilt,
// and the variant is reported as not run.
func startSluice(_ context.Context, _ sluiceInputs) (stop func() error, err error) {
	return nil, errSluiceNotBuilt
}
