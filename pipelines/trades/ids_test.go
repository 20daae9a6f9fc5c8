package trades

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// The expected ids below were computed with Python's uuid.uuid5 and
// hashlib.sha256, an implementation independent of this package.
func TestIDsMatchIndependentVectors(t *testing.T) {
	cases := []struct{ name, got, want string }{
		{"trade id", TradeID("u1", "coinbase", "T-1"), "9c4cc01b-147a-5753-8985-ab540f7aadc2"},
		{"trade id of a numeric ext id", TradeID("alice", "binance", "123456789"), "8c7e316c-cadf-5999-9fb1-46400fd11e62"},
		{"import id", ImportID("u1", "2025-01-01", "synthetic"), "a39f34aa4d03f9c667008c3f21fe4c75392c22db38293dca1017da9110557f02"},
		{"push import id", PushImportID("u1", "p-7"), "06786e5332d90ce230ada51dace75011f05634eb1e042bd7eea3106ceb1ca447"},
		{"reflect id sorts labels", ReflectEventID("tid", []string{"size_escalation", "overtrading"}), "cr-tid-619bf8fff89d"},
		{"reflect id of no label", ReflectEventID("tid", nil), "cr-tid-e3b0c44298fc"},
		{"progress", ProgressEventID("run9", 3), "ip-run9-3"},
		{"digest ready", DigestReadyEventID("u1", "2025-01-06", 2), "dr-u1-2025-01-06-r2"},
		{"dead-letter push id", DeadLetterPushID("abc", "T-9"), "dlq-abc-T-9"},
		{"completed", CompletedEventID("run9"), "ic-run9"},
		{"failed", FailedEventID("run9"), "if-run9"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	cmd := ImportCommand{UserID: "u1", Since: "2025-01-01", Broker: "synthetic"}
	if cmd.ImportID() != ImportID("u1", "2025-01-01", "synthetic") {
		t.Errorf("ImportCommand.ImportID = %s", cmd.ImportID())
	}
	if p := (PushCommand{UserID: "u1", PushID: "p-7"}); p.ImportID() != PushImportID("u1", "p-7") {
		t.Errorf("PushCommand.ImportID = %s", p.ImportID())
	}
}

func TestTradeUpsertedEventIDFollowsContent(t *testing.T) {
	base := Trade{
		ID: TradeID("u1", "coinbase", "T-1"), UserID: "u1", Broker: "coinbase", ExtID: "T-1", Symbol: "BTC-USD",
		Side: Buy, Qty: decimal.RequireFromString("0.5"), Price: decimal.RequireFromString("100"),
		Fee: decimal.Zero, TS: time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC),
	}
	id := TradeUpsertedEventID(base)
	if len(id) != len("tu-")+36+1+8 || id[:39] != "tu-"+base.ID {
		t.Fatalf("id %q is not tu-{trade_id}-{hash8}", id)
	}
	// The same value written differently (0.50 vs 0.5, another zone) is the
	// same version.
	same := base
	same.Qty = decimal.RequireFromString("0.50")
	same.TS = base.TS.In(time.FixedZone("X", 3600))
	if got := TradeUpsertedEventID(same); got != id {
		t.Errorf("equal content gave %s and %s", id, got)
	}
	changed := base
	changed.Price = decimal.RequireFromString("101")
	if got := TradeUpsertedEventID(changed); got == id {
		t.Errorf("changed price kept the id %s", id)
	}
}
