package testkit

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TxnFaults counts the transaction faults InjectTxnFaults injected.
type TxnFaults struct {
	OffsetCommits atomic.Int32 // transactional offset commits of the group seen
	FailedEnds    atomic.Int32 // committing ends answered with an error
	refusals      int32
}

// Injected reports whether every fault was injected: the refusals and at
// least one failed end.
func (f *TxnFaults) Injected() bool {
	return f.OffsetCommits.Load() > f.refusals && f.FailedEnds.Load() >= 1
}

// InjectTxnFaults makes k's kfake cluster (k.Fake() must not be nil)
// refuse the first refusals transactional offset commits of group (of
// every group when group is empty) as from a stale generation
// (ILLEGAL_GENERATION), then answer the next committing EndTxn with
// UNKNOWN_SERVER_ERROR: each of those transactions is aborted by its
// producer. Every other request is served normally.
func InjectTxnFaults(k *Kafka, group string, refusals int32) *TxnFaults {
	f := &TxnFaults{refusals: refusals}
	k.Fake().ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		rq := req.(*kmsg.TxnOffsetCommitRequest)
		if group != "" && rq.Group != group || f.OffsetCommits.Add(1) > refusals {
			return nil, nil, false
		}
		return TxnOffsetCommitRefusal(rq, kerr.IllegalGeneration.Code), nil, true
	})
	k.Fake().ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake().KeepControl()
		if !req.(*kmsg.EndTxnRequest).Commit || f.OffsetCommits.Load() <= refusals || f.FailedEnds.Add(1) > 1 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	return f
}

// TxnOffsetCommitRefusal answers req with code for every partition.
func TxnOffsetCommitRefusal(req *kmsg.TxnOffsetCommitRequest, code int16) *kmsg.TxnOffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		for _, p := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition = p.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
