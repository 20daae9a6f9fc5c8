package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// readyChannel is the notification channel of the ready triggers.
const readyChannel = "bench_ready"

// readyTriggerSQL returns the statements installing, on table, the trigger
// that notifies readyChannel with the ticker of every row written with
// status 'ready'. PostgreSQL delivers a notification when its transaction
// commits, so a listener learns of a ready row when readers can see it.
func readyTriggerSQL(table string) string {
	return `
CREATE OR REPLACE FUNCTION bench_notify_ready() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_notify('` + readyChannel + `', NEW.ticker::text); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS bench_ready ON ` + table + `;
CREATE TRIGGER bench_ready AFTER INSERT OR UPDATE ON ` + table + ` FOR EACH ROW
    WHEN (NEW.status = 'ready') EXECUTE FUNCTION bench_notify_ready();`
}

// readyClock is the clock both variants are timed by: it listens on
// readyChannel on a connection of its own and keeps, per ticker, when the
// first notification arrived (the commit of the key's first ready write).
// Its LISTEN is one transaction on the bench database (listenCommits).
// Methods are safe for concurrent use.
type readyClock struct {
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan error

	mu     sync.Mutex
	first  map[string]time.Time
	last   time.Time
	notify chan struct{} // closed and replaced at every new ticker
}

// listenCommits is the number of transactions a readyClock makes.
const listenCommits = 1

// startReadyClock connects to dsn, listens and starts receiving.
func startReadyClock(ctx context.Context, dsn string) (*readyClock, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("ready clock: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+readyChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("ready clock: listen: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	c := &readyClock{conn: conn, cancel: cancel, done: make(chan error, 1), first: map[string]time.Time{},
		notify: make(chan struct{})}
	go func() { c.done <- c.receive(rctx) }()
	return c, nil
}

func (c *readyClock) receive(ctx context.Context) error {
	for {
		n, err := c.conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		at := time.Now()
		c.mu.Lock()
		if _, ok := c.first[n.Payload]; !ok {
			c.first[n.Payload] = at
			c.last = at
			close(c.notify)
			c.notify = make(chan struct{})
		}
		c.mu.Unlock()
	}
}

// wait returns once keys tickers were notified or deadline passed, with how
// many were and when the last first notification arrived.
func (c *readyClock) wait(ctx context.Context, keys int, deadline time.Time) (int, time.Time, error) {
	for {
		c.mu.Lock()
		n, last, ch := len(c.first), c.last, c.notify
		c.mu.Unlock()
		if n >= keys {
			return n, last, nil
		}
		d := time.Until(deadline)
		if d <= 0 {
			return n, last, nil
		}
		t := time.NewTimer(d)
		select {
		case <-ch:
		case <-t.C:
		case err := <-c.done:
			t.Stop()
			c.done <- err
			return n, last, fmt.Errorf("ready clock: %w", err)
		case <-ctx.Done():
			t.Stop()
			return n, last, ctx.Err()
		}
		t.Stop()
	}
}

// lastReady returns when the last key's first ready write committed and how
// many keys had one.
func (c *readyClock) lastReady() (time.Time, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, len(c.first)
}

// close stops receiving and closes the connection.
func (c *readyClock) close(ctx context.Context) error {
	c.cancel()
	err := <-c.done
	cerr := c.conn.Close(context.WithoutCancel(ctx))
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return errors.Join(err, cerr)
}
