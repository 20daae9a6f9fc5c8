package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/registry"
	"github.com/sluicehq/sluice/pipelines/trades"
)

// tradesDemo imports synthetic trades for one user, pushes a known bias
// pattern for another, and asks for both users' weekly digests once their
// trades are scored.
func tradesDemo(_ *demoOptions) demoScenario {
	return demoScenario{
		about: fmt.Sprintf("a synthetic import (12 trades) and a push of %d trades with a known bias pattern → trades, bias_tags, a digest.request per user → digests",
			len(trades.DemoPushTrades(time.Time{}))),
		configure: func(s *registry.Settings) { s.Trades = trades.Config{} },
		run: func(ctx context.Context, _ pipelines.Spec, env pipelines.Env, _ *kadm.Client, _ *kgo.Client, out io.Writer) ([]demoRow, error) {
			sum, err := trades.DemoScenario(ctx, env, trades.Config{}, trades.DemoOptions{})
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(out, "  users %s (synthetic import) and %s (push); week %s\n", sum.ImportUser, sum.PushUser, sum.Window.StartDate())
			rows := []demoRow{{"trades", "trades stored", sum.Trades}}
			for _, l := range sum.Labels() {
				rows = append(rows, demoRow{"trades", "bias_tags " + l, sum.Tags[l]})
			}
			for _, d := range sum.Digests {
				fmt.Fprintf(out, "  digest of %s: revision %d, partial %t, object %s\n", d.UserID, d.Revision, d.Partial, d.ObjectKey)
			}
			key := trades.DigestObjectKey("{user}", sum.Window)
			return append(rows, demoRow{"trades", "digests emitted (objects " + key + ")", int64(len(sum.Digests))}), nil
		},
	}
}
