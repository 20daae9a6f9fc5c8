package run

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// onAutoCommit counts (sluice_runtime_errors_total{kind="commit"}) and
// logs a periodic commit that failed or that the coordinator refused for
// some partitions; kgo's own callback only logs to its logger, which the
// runner does not set, so such failures went unseen until a rebalance or
// the shutdown. The marks stay, and the next interval commits them again.
// Refusals that only say a rebalance is under way (REBALANCE_IN_PROGRESS,
// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) are logged at INFO and not
// counted: the revoke commits what is marked.
func (r *Runner[In, Out]) onAutoCommit(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil {
		if !errors.Is(err, context.Canceled) { // canceled: the client is leaving
			r.m.errors.WithLabelValues("commit").Inc()
			r.o.log.Warn("periodic offset commit failed; retried at the next interval", "group", r.cfg.Group, "err", err)
		}
		return
	}
	names := map[[16]byte]string{} // v10+ names topics by ID only
	for _, t := range req.Topics {
		names[t.TopicID] = t.Topic
	}
	var refused []string
	var first error
	rebalancing := true
	for _, t := range resp.Topics {
		topic := t.Topic
		if topic == "" {
			topic = names[t.TopicID]
		}
		for _, p := range t.Partitions {
			if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
				refused = append(refused, topic+"/"+strconv.Itoa(int(p.Partition)))
				if first == nil {
					first = perr
				}
				rebalancing = rebalancing && (errors.Is(perr, kerr.RebalanceInProgress) ||
					errors.Is(perr, kerr.IllegalGeneration) || errors.Is(perr, kerr.UnknownMemberID))
			}
		}
	}
	switch {
	case len(refused) == 0:
	case rebalancing:
		// A rebalance is under way: the group rejoins and the revoke
		// commits what is marked; not an error worth an alert.
		r.o.log.Info("periodic offset commit refused during a rebalance; committed on revoke or at the next interval", "group", r.cfg.Group,
			"partitions", len(refused), "first", refused[0], "err", first)
	default:
		r.m.errors.WithLabelValues("commit").Inc()
		r.o.log.Warn("periodic offset commit refused; retried at the next interval", "group", r.cfg.Group,
			"partitions", len(refused), "first", refused[0], "err", first)
	}
}
