package trades

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Ids are deterministic so that a redelivered record yields the same rows,
// objects and event ids, and consumers can drop duplicates by event id.

// ImportID is the id of an import command: the hex SHA-256 of
// "user_id|since|broker", with since exactly as the command carries it (the
// CLI and the API resolve the default before hashing, so that retries and
// redeliveries hash the same text).
func ImportID(userID, since, broker string) string {
	return sha256Hex(userID + "|" + since + "|" + broker)
}

// PushImportID is the import id of a push command: the hex SHA-256 of
// "user_id|push|push_id".
func PushImportID(userID, pushID string) string {
	return sha256Hex(userID + "|push|" + pushID)
}

// TradeID is the id of a trade: the UUIDv5 (SHA-1) of the name
// "user_id|broker|ext_id" in the URL namespace
// 6ba7b811-9dad-11d1-80b4-00c04fd430c8, in its canonical lower-case text.
func TradeID(userID, broker, extID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(userID+"|"+broker+"|"+extID)).String()
}

// DeadLetterPushID is the push_id of the one-trade push a bad trade of an
// import page is dead-lettered as: "dlq-{import_id}-{ext_id}". Redriving it
// replays that trade alone as a push.
func DeadLetterPushID(importID, extID string) string {
	return "dlq-" + importID + "-" + extID
}

// TradeUpsertedEventID is the event id of trade.upserted:
// "tu-{trade_id}-{hash8}", hash8 being the first 8 hex digits of the SHA-256
// of the trade's canonical content (see Trade.ContentHash). The same version
// of a trade always has the same id; a changed one (a broker correcting a
// fill) gets a new one.
func TradeUpsertedEventID(t Trade) string {
	return "tu-" + t.ID + "-" + t.ContentHash()[:8]
}

// ProgressEventID is the event id of import.progress: "ip-{run_id}-{page}".
func ProgressEventID(runID string, page int) string {
	return "ip-" + runID + "-" + strconv.Itoa(page)
}

// CompletedEventID is the event id of import.completed: "ic-{run_id}" (a
// run completes once).
func CompletedEventID(runID string) string { return "ic-" + runID }

// FailedEventID is the event id of import.failed: "if-{run_id}" (a run fails
// once).
func FailedEventID(runID string) string { return "if-" + runID }

// ReflectEventID is the reflect_event_id of a trade's coach.reflect for a
// label set: "cr-{trade_id}-{h}", h being the first 12 hex digits of the
// SHA-256 of the label names, sorted and joined by ",". The same (trade,
// label set) always has the same id, whatever the order labels come in.
func ReflectEventID(tradeID string, labels []string) string {
	sorted := slices.Clone(labels)
	slices.Sort(sorted)
	return "cr-" + tradeID + "-" + sha256Hex(strings.Join(sorted, ","))[:12]
}

// TradeScoredEventID is the event id of trade.scored:
// "ts-{trade_id}-{hash12}", hash12 being the first 12 hex digits of the
// SHA-256 of the payload's JSON. A re-score that changes nothing repeats the
// id.
func TradeScoredEventID(tradeID string, payloadJSON []byte) string {
	sum := sha256.Sum256(payloadJSON)
	return "ts-" + tradeID + "-" + hex.EncodeToString(sum[:])[:12]
}

// DigestReadyEventID is the event id of digest.ready:
// "dr-{user_id}-{period_start}-r{revision}" with period_start as
// YYYY-MM-DD.
func DigestReadyEventID(userID, periodStart string, revision int) string {
	return "dr-" + userID + "-" + periodStart + "-r" + strconv.Itoa(revision)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
