package run

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Token is the fencing token a [Store] stamps on every changelog record
// (headers sluice.state.epoch and sluice.state.version).
//
// Epoch is the partition owner's epoch: the consumer group's generation at
// which the member was assigned the partition, raised above the greatest
// epoch already in the partition's changelog when that is higher (a group
// deleted and recreated restarts its generations at 1). An owner keeps its
// epoch for as long as it keeps the partition, across rebalances that leave
// the partition where it is; the next owner's epoch is greater. Version
// counts the writes of the partition's changelog: every Put or Delete takes
// the next one, and it continues across owners (a restore resumes after
// the greatest version it read). So tokens grow in the order of the writes
// of every legitimate owner, and (Epoch, Version) orders the records of a
// partition even where compaction reordered nothing but removed records.
//
// The contract a changelog relies on: the owners of a partition write it
// one after the other (the runtime produces a batch's state before the
// partition's revoke completes, and a worker the runtime abandoned or
// whose partition was lost writes nothing more, a produce already in
// flight when it was abandoned or lost aside), so along a changelog
// partition's offsets the epochs of the runtime's records never decrease.
// A record whose epoch is below one already read before it in the same
// partition can only be a zombie's: a member that lost the partition
// without knowing it (a process paused past its session timeout) and wrote
// after the next owner had started writing. A restore refuses such records
// (sluice_state_fenced_total{where="restore"}). A zombie's record written
// before the next owner's first write of that partition cannot be told
// from a legitimate one by its position; a fold such as [KeepGreatest]
// still prefers any record of the new owner over it, and until the new
// owner writes that key, the zombie's value is restored as a record
// processed before the handover would be (at-least-once: the new owner
// processes the records after the last commit again). After a consumer
// group was deleted and recreated, the first new owner of a partition whose
// predecessor (a zombie of the old group) has not written to it yet takes
// that predecessor's epoch: their records tie on the epoch and only the
// version orders them.
//
// Compaction limits the fence: it keeps a key's last record by offset,
// not its greatest token, so a zombie's late record of a key written after
// the new owner's record of that key makes compaction remove the new
// owner's record. A restore of the compacted log then refuses the zombie's
// record (the key is missing) or, when no later epoch precedes it, restores
// the zombie's value; no Fold can bring back a record compaction removed.
// The fence thus protects against zombies until the changelog is compacted
// past their records, not beyond.
type Token struct {
	Epoch   int32
	Version int64
}

// Less reports whether t orders before u: a smaller epoch, or the same
// epoch and a smaller version.
func (t Token) Less(u Token) bool {
	if t.Epoch != u.Epoch {
		return t.Epoch < u.Epoch
	}
	return t.Version < u.Version
}

// Headers of a changelog record written by a [Store].
const (
	// HeaderStateEpoch and HeaderStateVersion carry the record's [Token]
	// as decimal integers.
	HeaderStateEpoch   = "sluice.state.epoch"
	HeaderStateVersion = "sluice.state.version"
	// HeaderStateTimer carries the key's one-shot timer (see
	// [Partition.SetTimer]) as Unix milliseconds; absent when none is set.
	HeaderStateTimer = "sluice.state.timer"
)

// tokenHeaders returns the headers of a changelog record with token tok
// and, when timer > 0, the key's timer.
func tokenHeaders(tok Token, timer int64) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		{Key: HeaderStateEpoch, Value: []byte(strconv.FormatInt(int64(tok.Epoch), 10))},
		{Key: HeaderStateVersion, Value: []byte(strconv.FormatInt(tok.Version, 10))},
	}
	if timer > 0 {
		hs = append(hs, kgo.RecordHeader{Key: HeaderStateTimer, Value: []byte(strconv.FormatInt(timer, 10))})
	}
	return hs
}

// parseToken reads a changelog record's token and timer headers. ok is
// false for a record without a valid token (one not written by a Store: an
// operator's tombstone, say).
func parseToken(hs []kgo.RecordHeader) (tok Token, timer int64, ok bool) {
	var haveEpoch, haveVersion bool
	for _, h := range hs {
		switch h.Key {
		case HeaderStateEpoch:
			e, err := strconv.ParseInt(string(h.Value), 10, 32)
			tok.Epoch, haveEpoch = int32(e), err == nil
		case HeaderStateVersion:
			v, err := strconv.ParseInt(string(h.Value), 10, 64)
			tok.Version, haveVersion = v, err == nil
		case HeaderStateTimer:
			if t, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil && t > 0 {
				timer = t
			}
		}
	}
	return tok, timer, haveEpoch && haveVersion
}

// ownerEpoch returns the epoch of an owner assigned a partition at group
// generation gen whose changelogs' greatest epoch is seen (0: none): gen,
// or seen+1 when that is greater (see [Token]).
func ownerEpoch(gen, seen int32) int32 { return max(gen, seen+1, 1) }

// Ownership describes the partition a stage or timer call works for.
type Ownership struct {
	Topic     string
	Partition int32
	// Generation is the consumer group's generation at which this member
	// was assigned the partition.
	Generation int32
	// Epoch is the owner's fencing epoch (see [Token]): Generation, or more
	// when the partition's state changelogs hold a greater epoch. It is
	// known once the partition's stores are restored, which happens before
	// any of its records is processed; without stores it is Generation.
	Epoch int32
}

type ownerKey struct{}

// Owner returns the partition the stage or timer called with ctx works
// for and its fencing epoch. ok is false when ctx does not come from a
// [Runner]'s worker.
func Owner(ctx context.Context) (o Ownership, ok bool) {
	w, ok := ctx.Value(ownerKey{}).(ownerOf)
	if !ok {
		return Ownership{}, false
	}
	return w.ownership(), true
}

// ownerOf is implemented by a worker: what Owner reads.
type ownerOf interface{ ownership() Ownership }

type generationKey struct{}

// AssignedGeneration returns the consumer group generation of the
// assignment whose hook (see [WithAssignHook]) was called with ctx: the
// generation at which this member got the partitions the hook is given.
func AssignedGeneration(ctx context.Context) (int32, bool) {
	g, ok := ctx.Value(generationKey{}).(int32)
	return g, ok
}
