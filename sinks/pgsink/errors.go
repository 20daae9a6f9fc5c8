package pgsink

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLState returns the SQLSTATE of the PostgreSQL error in err's chain, or ""
// when err does not come from the server.
func SQLState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsTransient reports whether err is a failure that a later retry of the
// same statement can be expected to get past:
//
//   - server errors: class 08 (connection exception), 25P03/25P04 idle in
//     transaction and transaction timeout, 40001 serialization failure,
//     40003 statement completion unknown, 40P01 deadlock, class 53
//     insufficient resources (too many connections, disk full, out of
//     memory), 55P03 lock not available (lock_timeout), 55006 object in use,
//     57014 query cancelled (statement timeout), 57P01/57P02/57P03/57P05
//     admin shutdown, crash shutdown, cannot connect now, idle session
//     timeout, class 58 system/I/O errors;
//   - client side: failures to connect, network errors and timeouts, a
//     connection closed or reset under a statement, an unexpected EOF, a
//     context deadline, and anything pgconn marks safe to retry.
//
// Any other server error (data exceptions, integrity violations, undefined
// tables, syntax errors, authentication failures) is not transient.
// context.Canceled is not transient: it means the caller gave up.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return transientState(pe.Code) && !copyAborted(err)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, target := range []error{
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, pgconn.ErrConnClosed,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func transientState(code string) bool {
	switch code {
	case "25P03", "25P04", "40001", "40003", "40P01", "55P03", "55006", "57014", "57P01", "57P02", "57P03", "57P05":
		return true
	}
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") || strings.HasPrefix(code, "58")
}

// IsPermanent reports whether err is a server error caused by the values of
// the rows written, so that the same rows can never succeed: class 22 (data
// exception: numeric value out of range 22003, invalid byte sequence 22021,
// string too long 22001, …), class 23 (integrity constraint violation: not
// null, check, unique, foreign key, exclusion), 42804 datatype mismatch and
// 54000 program limit exceeded (for example an index row larger than a
// B-tree page allows), and a COPY that the client aborted because it could
// not encode a row's value for its column (see [copyAborted]). The sink bisects a batch that fails with such an
// error to find and reject the culprit rows.
func IsPermanent(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return permanentState(pe.Code) || copyAborted(err)
}

// copyFailedPrefix starts the message of the error PostgreSQL answers a
// COPY FROM STDIN with when the client aborts it (CopyFail): "COPY from
// stdin failed: " and the client's reason — in English only: the server
// translates it to the session's lc_messages.
const copyFailedPrefix = "COPY from stdin failed: "

// copyAborted reports whether err is PostgreSQL's answer to a COPY the
// client aborted. pgx aborts a COPY when it cannot encode a value for its
// column (an int64 beyond the range of an int4 column, a string that is no
// uuid, …), which no retry changes; the server reports it with SQLSTATE
// 57014 (query_canceled), which otherwise means a statement timeout or a
// cancel request. The sink's COPY recognises the abort on the client side
// and returns an [*encodeFailed], whatever the language of the server's
// message; a bare server error is recognised by its English message.
func copyAborted(err error) bool {
	var ef *encodeFailed
	if errors.As(err, &ef) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014" && strings.HasPrefix(pe.Message, copyFailedPrefix)
}

func permanentState(code string) bool {
	switch code {
	case "42804", "54000":
		return true
	}
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23")
}
