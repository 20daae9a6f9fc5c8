// Package registry lists the pipelines sluice knows: sluice run, sluice
// demo and the CLI's help read this list. To add a pipeline, declare it in
// its own package (a Declare function returning a pipelines.Spec, in
// declare.go) and add one line to All.
package registry

import (
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/modules"
	"github.com/sluicehq/sluice/pipelines/silver"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/pipelines/trades"
)

// Settings are the pipeline settings a command chooses (flags, the demo's
// synthetic sources). Their group and topic names are ignored: the
// declarations name them. The zero value takes every default.
type Settings struct {
	Silver silver.Config
	Ticks  ticks.Config
	Smap   smap.Config
	Trades trades.Config
	// Modules reads MODULES_* and UW_* when its Getenv is set.
	Modules modules.Config
}

// All returns the declaration of every pipeline, in a fixed order (the
// demo's); the slice is new on every call.
func All(s Settings) []pipelines.Spec {
	return []pipelines.Spec{
		silver.Declare(s.Silver),
		ticks.Declare(s.Ticks),
		smap.Declare(s.Smap),
		trades.Declare(s.Trades),
		modules.Declare(s.Modules),
	}
}
