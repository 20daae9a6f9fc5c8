package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// invalidDatabaseURL turns a DATABASE_URL parse error into
// "invalid DATABASE_URL: REASON". pgx's own text quotes the connection
// string and masks only the passwords it recognises (not those of a
// malformed keyword/value string such as "password = x" or of a string that
// is no DSN at all), so nothing of the string is shown: only pgx's reason.
func invalidDatabaseURL(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return fmt.Errorf("invalid DATABASE_URL: %w", err)
	}
	reason := pe.Error()
	if i := strings.LastIndex(reason, "`: "); i >= 0 {
		reason = reason[i+len("`: "):]
	}
	return fmt.Errorf("invalid DATABASE_URL: %s", oneLine(reason))
}

// postgresError is the one-line form of every PostgreSQL connection failure
// of the CLI: "postgres at HOST:PORT: CAUSE". pgx reports a failed connect
// as "failed to connect to `user=… database=…`:" followed by one line per
// address tried (each "ADDR (HOST): CAUSE"); here the causes are kept, each
// once, joined by "; ".
func postgresError(host string, port uint16, err error) error {
	return fmt.Errorf("postgres at %s:%d: %s", host, port, postgresCause(err))
}

// postgresCause returns the reasons of err without pgx's connect prefix and
// per-address decorations, on one line.
func postgresCause(err error) string {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return oneLine(err.Error())
	}
	inner := ce.Unwrap()
	var parts []error
	if j, ok := inner.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	} else {
		parts = []error{inner}
	}
	var causes []string
	seen := map[string]bool{}
	for _, p := range parts {
		if u := errors.Unwrap(p); u != nil {
			p = u // drop "ADDR (HOST): "
		}
		c := oneLine(p.Error())
		if !seen[c] {
			seen[c] = true
			causes = append(causes, c)
		}
	}
	return strings.Join(causes, "; ")
}

// oneLine replaces line breaks and the tabs that indent continuation lines
// with "; " and single spaces.
func oneLine(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n\t", "; ")
	s = strings.ReplaceAll(s, "\n", "; ")
	return strings.ReplaceAll(s, "\t", " ")
}
