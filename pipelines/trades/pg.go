package trades

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// importDB is what trades-import needs of Postgres. Implementations are
// safe for concurrent use.
type importDB interface {
	// Connection returns the user's broker_connections row for broker;
	// ok is false when there is none or it is not active.
	Connection(ctx context.Context, userID, broker string) (conn Connection, ok bool, err error)
	// UpsertTrades upserts trades (all of one import page) in one
	// transaction, keyed by (user_id, broker, ext_id): a row whose
	// content is unchanged is left as it is (updated_at and import_id
	// included).
	UpsertTrades(ctx context.Context, importID string, trades []Trade) error
}

// Connection is a broker_connections row: its tokens stay sealed
// (TokenSealer) until a fetch opens the access token.
type Connection struct {
	AccessEnc, RefreshEnc []byte
}

// pgImportDB is importDB on a pgx pool (the tables of the trades
// migration).
type pgImportDB struct{ pool *pgxpool.Pool }

func (d pgImportDB) Connection(ctx context.Context, userID, broker string) (Connection, bool, error) {
	var c Connection
	err := d.pool.QueryRow(ctx,
		`SELECT access_enc, refresh_enc FROM broker_connections WHERE user_id = $1 AND broker = $2 AND active`,
		userID, broker).Scan(&c.AccessEnc, &c.RefreshEnc)
	if errors.Is(err, pgx.ErrNoRows) {
		return Connection{}, false, nil
	}
	if err != nil {
		return Connection{}, false, fmt.Errorf("broker_connections %s/%s: %w", userID, broker, err)
	}
	return c, true, nil
}

const upsertTradeSQL = `INSERT INTO trades (id, user_id, broker, ext_id, symbol, side, qty, price, fee, ts, import_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (user_id, broker, ext_id) DO UPDATE SET
  symbol = EXCLUDED.symbol, side = EXCLUDED.side, qty = EXCLUDED.qty, price = EXCLUDED.price,
  fee = EXCLUDED.fee, ts = EXCLUDED.ts, import_id = EXCLUDED.import_id, updated_at = now()
WHERE (trades.symbol, trades.side, trades.qty, trades.price, trades.fee, trades.ts)
  IS DISTINCT FROM (EXCLUDED.symbol, EXCLUDED.side, EXCLUDED.qty, EXCLUDED.price, EXCLUDED.fee, EXCLUDED.ts)`

func (d pgImportDB) UpsertTrades(ctx context.Context, importID string, trades []Trade) error {
	if len(trades) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, t := range trades {
			b.Queue(upsertTradeSQL, t.ID, t.UserID, t.Broker, t.ExtID, t.Symbol, string(t.Side),
				exactString(t.Qty), exactString(t.Price), exactString(t.Fee), t.TS, importID)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("upsert %d trades: %w", len(trades), err)
		}
		return nil
	})
}
