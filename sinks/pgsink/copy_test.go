package pgsink

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The server's answer to a COPY the client aborted is translated to the
// session's lc_messages. A bare 57014 in another language cannot be told
// from a statement timeout, so it stays transient; the same answer
// recognised on the client side (an *encodeFailed, see copyRows) is
// permanent, whatever its language.
func TestCopyAbortedWhateverTheLanguage(t *testing.T) {
	t.Parallel()
	de := &pgconn.PgError{Code: "57014", Message: "COPY FROM STDIN fehlgeschlagen: unable to encode 1099511627776 into binary format for int4 (OID 23)"}
	timeout := &pgconn.PgError{Code: "57014", Message: "Anweisung wird abgebrochen wegen Zeitüberschreitung der Anweisung"}
	cases := []struct {
		name                 string
		err                  error
		transient, permanent bool
	}{
		{"translated answer alone", de, true, false},
		{"translated statement timeout", timeout, true, false},
		{"translated answer recognised by the client", fmt.Errorf("copy new rows: %w", &encodeFailed{key: "3", err: de}), false, true},
		{"English answer alone", &pgconn.PgError{Code: "57014", Message: copyFailedPrefix + "unable to encode"}, false, true},
	}
	for _, tc := range cases {
		if got := IsTransient(tc.err); got != tc.transient {
			t.Errorf("%s: IsTransient = %v, want %v", tc.name, got, tc.transient)
		}
		if got := IsPermanent(tc.err); got != tc.permanent {
			t.Errorf("%s: IsPermanent = %v, want %v", tc.name, got, tc.permanent)
		}
	}
	ef := &encodeFailed{key: "3", err: de}
	if SQLState(ef) != "57014" {
		t.Errorf("SQLState(encodeFailed) = %q, want the server's 57014", SQLState(ef))
	}
}
