package pgsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func pgErr(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }

func TestIsTransientAndIsPermanent(t *testing.T) {
	t.Parallel()
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name                 string
		err                  error
		transient, permanent bool
	}{
		{"nil", nil, false, false},
		{"plain error", errors.New("boom"), false, false},
		{"serialization failure", pgErr("40001"), true, false},
		{"deadlock", pgErr("40P01"), true, false},
		{"admin shutdown", pgErr("57P01"), true, false},
		{"crash shutdown", pgErr("57P02"), true, false},
		{"cannot connect now", pgErr("57P03"), true, false},
		{"idle in transaction timeout", pgErr("25P03"), true, false},
		{"transaction timeout", pgErr("25P04"), true, false},
		{"idle session timeout", pgErr("57P05"), true, false},
		{"read-only transaction", pgErr("25006"), false, false},
		{"connection failure", pgErr("08006"), true, false},
		{"connection exception", pgErr("08000"), true, false},
		{"too many connections", pgErr("53300"), true, false},
		{"disk full", pgErr("53100"), true, false},
		{"lock not available", pgErr("55P03"), true, false},
		{"statement timeout", pgErr("57014"), true, false},
		{"copy aborted by the client", &pgconn.PgError{Code: "57014", Message: "COPY from stdin failed: unable to encode 1099511627776 into binary format for int4 (OID 23)"}, false, true},
		{"io error", pgErr("58030"), true, false},
		{"wrapped deadlock", fmt.Errorf("upsert: %w", pgErr("40P01")), true, false},
		{"numeric out of range", pgErr("22003"), false, true},
		{"invalid byte sequence", pgErr("22021"), false, true},
		{"string too long", pgErr("22001"), false, true},
		{"not null", pgErr("23502"), false, true},
		{"unique", pgErr("23505"), false, true},
		{"check", pgErr("23514"), false, true},
		{"datatype mismatch", pgErr("42804"), false, true},
		{"index row too large", pgErr("54000"), false, true},
		{"undefined table", pgErr("42P01"), false, false},
		{"syntax error", pgErr("42601"), false, false},
		{"bad password", pgErr("28P01"), false, false},
		{"connection refused", opErr, true, false},
		{"wrapped connection refused", fmt.Errorf("begin: %w", opErr), true, false},
		{"bare ECONNRESET", fmt.Errorf("read: %w", syscall.ECONNRESET), true, false},
		{"EPIPE", syscall.EPIPE, true, false},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, false},
		{"EOF", io.EOF, true, false},
		{"conn closed", pgconn.ErrConnClosed, true, false},
		{"deadline", fmt.Errorf("copy: %w", context.DeadlineExceeded), true, false},
		{"canceled", fmt.Errorf("copy: %w", context.Canceled), false, false},
	}
	for _, tc := range cases {
		if got := IsTransient(tc.err); got != tc.transient {
			t.Errorf("%s: IsTransient = %v, want %v", tc.name, got, tc.transient)
		}
		if got := IsPermanent(tc.err); got != tc.permanent {
			t.Errorf("%s: IsPermanent = %v, want %v", tc.name, got, tc.permanent)
		}
	}
	if got := SQLState(fmt.Errorf("x: %w", pgErr("23505"))); got != "23505" {
		t.Errorf("SQLState = %q", got)
	}
	if got := SQLState(io.EOF); got != "" {
		t.Errorf("SQLState(EOF) = %q", got)
	}
}
