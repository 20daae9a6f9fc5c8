package silver

import "time"

// TARow is one row of ta_silver, column for column (seed DDL). Nullable
// columns are pointers (nil = NULL). Prices are float64 because the DDL
// declares them DOUBLE PRECISION.
type TARow struct {
	Symbol          string    // symbol TEXT NOT NULL (key)
	TradeDate       time.Time // trade_date DATE NOT NULL (key); midnight UTC
	Open            float64   // open DOUBLE PRECISION NOT NULL
	High            float64   // high DOUBLE PRECISION NOT NULL
	Low             float64   // low DOUBLE PRECISION NOT NULL
	Close           float64   // close DOUBLE PRECISION NOT NULL
	Volume          int64     // volume BIGINT NOT NULL
	VWAP            *float64  // vwap DOUBLE PRECISION
	AdjClose        *float64  // adj_close DOUBLE PRECISION
	Currency        string    // currency TEXT NOT NULL DEFAULT 'VND'
	PriceMultiplier float64   // price_multiplier DOUBLE PRECISION NOT NULL DEFAULT 1.0
	Source          *string   // source TEXT
	// FirstSeenTime is first_seen_time TIMESTAMPTZ; the zero time stands for
	// NULL (the stage always fills it).
	FirstSeenTime time.Time
	// IngestTime is ingest_time TIMESTAMPTZ NOT NULL DEFAULT now(). It is set
	// by the database on every change and ignored on write.
	IngestTime  time.Time
	ContentHash *string // content_hash TEXT
}

// Key returns the natural key (symbol, trade_date) as one string,
// "SYMBOL|YYYY-MM-DD".
func (r *TARow) Key() string {
	var buf [32]byte // one allocation: the string's
	return string(appendTAKey(buf[:0], r))
}

// SARow is one row of sa_silver, column for column (seed DDL). Nullable
// columns are pointers or nil slices (nil = NULL).
type SARow struct {
	URLCanonical          string    // url_canonical TEXT NOT NULL (key)
	SourceDomain          string    // source_domain TEXT NOT NULL
	PublisherTime         time.Time // publisher_time TIMESTAMPTZ NOT NULL
	FirstSeenTime         time.Time // first_seen_time TIMESTAMPTZ NOT NULL
	Language              *string   // language TEXT: "vi", "en" or "unknown" from the stage
	Title                 *string   // title TEXT
	TextNormalized        *string   // text_normalized TEXT
	ContentHash           string    // content_hash TEXT NOT NULL
	Symbols               []string  // symbols TEXT[]; an empty non-nil slice is '{}'
	Author                *string   // author TEXT
	TopicTags             []string  // topic_tags TEXT[]
	HypeRaw               *float64  // hype_raw DOUBLE PRECISION
	HypeCrowd             *float64  // hype_crowd DOUBLE PRECISION
	HypeElitist           *float64  // hype_elitist DOUBLE PRECISION
	AccountWeightsApplied *bool     // account_weights_applied BOOLEAN
	// IngestTime is ingest_time TIMESTAMPTZ NOT NULL DEFAULT now(). It is set
	// by the database on every change and ignored on write.
	IngestTime time.Time
}

// Key returns the natural key, url_canonical.
func (r *SARow) Key() string { return r.URLCanonical }

// Row is the silver stage's output: exactly one of TA and SA is set.
type Row struct {
	TA *TARow
	SA *SARow
}

// Key returns the natural key of the row prefixed by its table ("ta|…" or
// "sa|…"), or "" for an empty Row.
func (r Row) Key() string {
	switch {
	case r.TA != nil:
		return "ta|" + r.TA.Key()
	case r.SA != nil:
		return "sa|" + r.SA.Key()
	}
	return ""
}
