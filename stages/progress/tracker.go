package progress

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Statuses of a job.
const (
	StatusInitializing   = "INITIALIZING"
	StatusCrawling       = "CRAWLING"
	StatusProcessingWait = "PROCESSING_WAIT"
	StatusDone           = "DONE"
	// StatusNotFound is reported by Get for a job without state; it is never
	// stored.
	StatusNotFound = "NOT_FOUND"
)

// DefaultTTL is how long a job's state lives after it was created.
const DefaultTTL = 7 * 24 * time.Hour

// ErrMissing is returned by Count and MarkDone when the job has no state in
// Redis (never created, expired or flushed).
var ErrMissing = errors.New("progress: job state missing")

// ErrInvalidID is returned by every call that takes a job id (Get too) for
// a job id that CheckJobID refuses (empty, or ending in ":items" or
// ":found"), and by Count, Discover and Rebuild for an empty item id: such
// a call can never be right, so it is refused without touching Redis.
var ErrInvalidID = errors.New("progress: invalid job or item id")

// Suffixes of a job's set keys (see the package documentation).
const (
	itemsSuffix = ":items"
	foundSuffix = ":found"
)

// CheckJobID returns an error wrapping ErrInvalidID when id cannot be a
// job id: empty, or ending in ":items" or ":found". The keys of job id are
// P{id}, P{id}:items and P{id}:found, so the hash of a job "x:items" would
// be the items set of job "x" (and "x:found" its found set): both jobs
// would fail with WRONGTYPE errors or corrupt each other's counts. Every
// Tracker call that takes a job id checks it with CheckJobID; callers that
// accept ids from outside can check them first to refuse a record early.
func CheckJobID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty job id", ErrInvalidID)
	case strings.HasSuffix(id, itemsSuffix), strings.HasSuffix(id, foundSuffix):
		return fmt.Errorf("%w: job id %.100q ends in %q or %q, the suffixes of another job's keys",
			ErrInvalidID, id, itemsSuffix, foundSuffix)
	}
	return nil
}

// State is a snapshot of one job.
type State struct {
	ID     string
	Status string // one of the Status* constants
	Total  int64
	Done   int64
	Errors int64
	// Sealed: the total is final.
	Sealed bool
	// Pending: the completion was decided but MarkDone was not called yet.
	Pending bool
	// CompletedAt is set by MarkDone (zero before).
	CompletedAt time.Time
}

// Percent is done/total in percent, rounded to two decimals (0 when the
// total is 0), capped at 100.
func (s State) Percent() float64 {
	if s.Total <= 0 {
		return 0
	}
	p := math.Round(float64(s.Done)/float64(s.Total)*10000) / 100
	return min(p, 100)
}

// Decision is the outcome of a Count, Seal or Rebuild.
type Decision struct {
	State
	// Counted reports that this call counted the item (Count only); false
	// means the item had been counted before.
	Counted bool
	// Publish tells the caller to publish the job's completion now and then
	// call MarkDone.
	Publish bool
	// Repeat reports that Publish repeats an earlier decision whose
	// MarkDone never happened (crash recovery): the completion may already
	// have been published once.
	Repeat bool
}

// Config configures a Tracker.
type Config struct {
	// Prefix is prepended to job ids to form keys, e.g. "smap:proj:". Required.
	Prefix string
	// TTL of a job's keys (default DefaultTTL).
	TTL time.Duration
	// Now is the clock for completed_at (default time.Now).
	Now func() time.Time
}

// Tracker reads and updates job progress in Redis. It is safe for
// concurrent use.
type Tracker struct {
	rdb redis.Cmdable
	cfg Config
}

// New returns a tracker on rdb (a *redis.Client on the logical database
// reserved for state, DB 1 in smap).
func New(rdb redis.Cmdable, cfg Config) (*Tracker, error) {
	if rdb == nil {
		return nil, errors.New("progress: nil redis client")
	}
	if cfg.Prefix == "" {
		return nil, errors.New("progress: key prefix is required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tracker{rdb: rdb, cfg: cfg}, nil
}

// Key returns the hash key of job id (Prefix + id); it does not check id
// (see CheckJobID).
func (t *Tracker) Key(id string) string { return t.cfg.Prefix + id }

func (t *Tracker) keys(id string) []string {
	k := t.Key(id)
	return []string{k, k + itemsSuffix, k + foundSuffix}
}

func (t *Tracker) ttlMs() int64 { return t.cfg.TTL.Milliseconds() }

// luaCommon holds the helpers every script shares. ensure creates the hash
// with zero counters when it does not exist; decide takes the completion
// decision and returns the state in the shape parseDecision reads. Counters
// are returned as stored (integer strings): a Lua number would be formatted
// with 14 significant digits ("1.1258999068426e+15").
//
// decide records in pending_by who took the decision: the item id of the
// Count that took it, "" for a seal or a rebuild. A pending decision is
// repeated (publish 2) for a Count only when its item is pending_by (the
// deciding record, redelivered after a crash), so that duplicates of other
// items (a rebalance redelivering uncommitted records) do not publish the
// completion again; every other caller (by nil) repeats it. A pending
// decision without pending_by (taken before this field existed) is
// repeated for every caller.
const luaCommon = `
local function ensure(key, status, ttl)
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'status', status, 'total', 0, 'done', 0, 'errors', 0, 'sealed', 0, 'pending', 0)
    redis.call('PEXPIRE', key, ttl)
    return true
  end
  return false
end
local function follow(key, set)
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then redis.call('PEXPIRE', set, ttl) end
end
local function decide(key, counted, by)
  local h = redis.call('HMGET', key, 'status', 'total', 'done', 'errors', 'sealed', 'pending', 'completed_at', 'pending_by')
  local status = h[1] or ''
  local total = tonumber(h[2]) or 0
  local done = tonumber(h[3]) or 0
  local sealed = h[5] == '1'
  local pending = h[6] == '1'
  local publish = 0
  if status ~= 'DONE' then
    if pending then
      if by == nil or not h[8] or h[8] == by then publish = 2 end
    elseif sealed and done >= total then
      redis.call('HSET', key, 'pending', 1, 'pending_by', by or '')
      pending = true
      publish = 1
    end
  end
  return {status, h[2] or '0', h[3] or '0', h[4] or '0', sealed and '1' or '0', pending and '1' or '0', h[7] or '', tostring(publish), tostring(counted)}
end
`

// KEYS: hash. ARGV: ttl.
var initScript = redis.NewScript(luaCommon + `
ensure(KEYS[1], 'INITIALIZING', tonumber(ARGV[1]))
return decide(KEYS[1], 0, nil)
`)

// KEYS: hash. ARGV: ttl. INITIALIZING → CRAWLING; later statuses stay.
var startScript = redis.NewScript(luaCommon + `
ensure(KEYS[1], 'CRAWLING', tonumber(ARGV[1]))
if redis.call('HGET', KEYS[1], 'status') == 'INITIALIZING' then
  redis.call('HSET', KEYS[1], 'status', 'CRAWLING')
end
return decide(KEYS[1], 0, nil)
`)

// KEYS: hash, items, found. ARGV: ttl, item ids…
var discoverScript = redis.NewScript(luaCommon + `
ensure(KEYS[1], 'CRAWLING', tonumber(ARGV[1]))
local h = redis.call('HMGET', KEYS[1], 'status', 'sealed')
if h[1] == 'INITIALIZING' then redis.call('HSET', KEYS[1], 'status', 'CRAWLING') end
local added = 0
if h[2] ~= '1' and h[1] ~= 'DONE' then
  for i = 2, #ARGV do
    added = added + redis.call('SADD', KEYS[3], ARGV[i])
  end
  if added > 0 then
    redis.call('HINCRBY', KEYS[1], 'total', added)
    follow(KEYS[1], KEYS[3])
  end
end
return decide(KEYS[1], added, nil)
`)

// KEYS: hash, items, found. ARGV: ttl, total, exact (0/1). The sealed
// total is the caller's count, or (not exact) the larger of it and the
// distinct items discovered.
var sealScript = redis.NewScript(luaCommon + `
ensure(KEYS[1], 'PROCESSING_WAIT', tonumber(ARGV[1]))
local h = redis.call('HMGET', KEYS[1], 'status', 'sealed')
if h[2] ~= '1' and h[1] ~= 'DONE' then
  local total = ARGV[2]
  local n = redis.call('SCARD', KEYS[3])
  if ARGV[3] ~= '1' and tonumber(total) < n then total = string.format('%d', n) end
  redis.call('HSET', KEYS[1], 'total', total, 'sealed', 1, 'status', 'PROCESSING_WAIT')
end
return decide(KEYS[1], 0, nil)
`)

// KEYS: hash, items. ARGV: item, failed (0/1).
var countScript = redis.NewScript(luaCommon + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local counted = 0
if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
  counted = 1
  redis.call('HINCRBY', KEYS[1], 'done', 1)
  if ARGV[2] == '1' then redis.call('HINCRBY', KEYS[1], 'errors', 1) end
  follow(KEYS[1], KEYS[2])
end
return decide(KEYS[1], counted, ARGV[1])
`)

// KEYS: hash. ARGV: completed_at.
var markDoneScript = redis.NewScript(luaCommon + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
if redis.call('HGET', KEYS[1], 'status') ~= 'DONE' then
  redis.call('HSET', KEYS[1], 'status', 'DONE', 'pending', 0, 'completed_at', ARGV[1])
  redis.call('HDEL', KEYS[1], 'pending_by')
end
return decide(KEYS[1], 0, nil)
`)

// KEYS: hash, items, found. ARGV: ttl, total, sealed, completed_at (” if
// not completed), then pairs item id, failed (0/1).
var rebuildScript = redis.NewScript(luaCommon + `
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local ttl = tonumber(ARGV[1])
local n, errs = 0, 0
local chunk = {}
local function flush()
  if #chunk > 0 then
    redis.call('SADD', KEYS[2], unpack(chunk))
    redis.call('SADD', KEYS[3], unpack(chunk))
    chunk = {}
  end
end
for i = 5, #ARGV, 2 do
  n = n + 1
  chunk[#chunk + 1] = ARGV[i]
  if ARGV[i + 1] == '1' then errs = errs + 1 end
  if #chunk >= 4000 then flush() end
end
flush()
n = redis.call('SCARD', KEYS[2])
local total = ARGV[2]
if tonumber(total) < n then total = string.format('%d', n) end
local status = 'INITIALIZING'
if ARGV[4] ~= '' then status = 'DONE'
elseif ARGV[3] == '1' then status = 'PROCESSING_WAIT'
elseif tonumber(total) > 0 then status = 'CRAWLING' end
redis.call('HSET', KEYS[1], 'status', status, 'total', total, 'done', string.format('%d', n), 'errors', string.format('%d', errs), 'sealed', ARGV[3], 'pending', 0)
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'completed_at', ARGV[4]) end
redis.call('PEXPIRE', KEYS[1], ttl)
if n > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return decide(KEYS[1], 0, nil)
`)

func (t *Tracker) eval(ctx context.Context, op string, s *redis.Script, id string, keys []string, args ...any) (Decision, error) {
	if err := CheckJobID(id); err != nil {
		return Decision{}, fmt.Errorf("progress: %s: %w", op, err)
	}
	res, err := s.Run(ctx, t.rdb, keys, args...).StringSlice()
	if err != nil {
		return Decision{}, fmt.Errorf("progress: %s %s: %w", op, id, err)
	}
	if len(res) == 1 && res[0] == "missing" {
		return Decision{}, fmt.Errorf("progress: %s %s: %w", op, id, ErrMissing)
	}
	d, err := parseDecision(id, res)
	if err != nil {
		return Decision{}, fmt.Errorf("progress: %s %s: %w", op, id, err)
	}
	return d, nil
}

func parseDecision(id string, r []string) (Decision, error) {
	if len(r) != 9 {
		return Decision{}, fmt.Errorf("unexpected script reply %q", r)
	}
	var d Decision
	d.ID, d.Status = id, r[0]
	var err error
	num := func(s string) int64 {
		v, e := strconv.ParseInt(s, 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("bad number %q in script reply", s)
		}
		return v
	}
	d.Total, d.Done, d.Errors = num(r[1]), num(r[2]), num(r[3])
	d.Sealed, d.Pending = r[4] == "1", r[5] == "1"
	if r[6] != "" {
		at, perr := time.Parse(time.RFC3339Nano, r[6])
		if perr != nil {
			return Decision{}, fmt.Errorf("bad completed_at %q: %w", r[6], perr)
		}
		d.CompletedAt = at
	}
	switch r[7] {
	case "1":
		d.Publish = true
	case "2":
		d.Publish, d.Repeat = true, true
	}
	d.Counted = r[8] != "0"
	return d, err
}

// Init creates the job's state (status INITIALIZING, zero counters, TTL)
// unless it exists; an existing job is left unchanged. Idempotent.
func (t *Tracker) Init(ctx context.Context, id string) (State, error) {
	d, err := t.eval(ctx, "init", initScript, id, t.keys(id)[:1], t.ttlMs())
	return d.State, err
}

// Start moves an INITIALIZING job to CRAWLING (creating it when missing);
// later statuses are kept. Idempotent.
func (t *Tracker) Start(ctx context.Context, id string) (State, error) {
	d, err := t.eval(ctx, "start", startScript, id, t.keys(id)[:1], t.ttlMs())
	return d.State, err
}

// Discover adds items to the job's total, each distinct item once, while
// the total is not sealed (after the seal it changes nothing). It returns
// the state; Decision.Counted is true when at least one item was new. An
// empty item id is refused (ErrInvalidID) and nothing is added.
func (t *Tracker) Discover(ctx context.Context, id string, items ...string) (Decision, error) {
	args := make([]any, 0, len(items)+1)
	args = append(args, t.ttlMs())
	for _, it := range items {
		if it == "" {
			return Decision{}, fmt.Errorf("progress: discover %.100q: %w: empty item id", id, ErrInvalidID)
		}
		args = append(args, it)
	}
	return t.eval(ctx, "discover", discoverScript, id, t.keys(id), args...)
}

// Seal makes the total final (the larger of total and the distinct items
// discovered) and moves the job to PROCESSING_WAIT. If every item was
// already counted, the completion is decided here (Decision.Publish). Seal
// of a sealed job changes nothing but still reports a pending completion,
// so that a caller that crashed after sealing re-publishes it.
func (t *Tracker) Seal(ctx context.Context, id string, total int64) (Decision, error) {
	return t.eval(ctx, "seal", sealScript, id, t.keys(id), t.ttlMs(), total, 0)
}

// SealExact is Seal with the total exactly total, even when more distinct
// items were discovered: for a caller whose own record of the items (not
// the discoveries, which another writer may have added to) is the one
// whose items are processed.
func (t *Tracker) SealExact(ctx context.Context, id string, total int64) (Decision, error) {
	return t.eval(ctx, "seal", sealScript, id, t.keys(id), t.ttlMs(), total, 1)
}

// Count counts item once (failed items also increment errors) and decides
// completion atomically. A job without state returns ErrMissing; a job id
// that CheckJobID refuses or an empty item, ErrInvalidID. While a
// completion is pending, Count asks to publish it again (Decision.Repeat)
// only for the item whose count took the decision (its record redelivered
// after a crash), not for duplicates of other items.
func (t *Tracker) Count(ctx context.Context, id, item string, failed bool) (Decision, error) {
	if item == "" {
		return Decision{}, fmt.Errorf("progress: count %.100q: %w: empty item id", id, ErrInvalidID)
	}
	f := "0"
	if failed {
		f = "1"
	}
	return t.eval(ctx, "count", countScript, id, t.keys(id)[:2], item, f)
}

// MarkDone records that the completion was published: status DONE, pending
// cleared, completed_at set (kept when already DONE). Call it only after
// the completion event was acknowledged.
func (t *Tracker) MarkDone(ctx context.Context, id string) (State, error) {
	at := t.cfg.Now().UTC().Format(time.RFC3339Nano)
	d, err := t.eval(ctx, "mark done", markDoneScript, id, t.keys(id)[:1], at)
	return d.State, err
}

// Snapshot is a job's progress as recorded by the system of record, used
// by Rebuild.
type Snapshot struct {
	// Items maps every processed item id to whether it failed.
	Items map[string]bool
	// Total is the known total (the number of items wins when larger).
	Total int64
	// Sealed reports that the total is final.
	Sealed bool
	// CompletedAt is when the completion was published (zero: not yet).
	CompletedAt time.Time
}

// Rebuild replaces the job's state with snap in one script: counted items,
// done, errors, total, seal and status (DONE when CompletedAt is set). When
// the rebuilt job is complete but was never marked done, Decision.Publish
// asks the caller to publish the completion and call MarkDone. An empty
// item id in snap is refused (ErrInvalidID) and the state is left as it is.
func (t *Tracker) Rebuild(ctx context.Context, id string, snap Snapshot) (Decision, error) {
	completed := ""
	if !snap.CompletedAt.IsZero() {
		completed = snap.CompletedAt.UTC().Format(time.RFC3339Nano)
	}
	sealed := "0"
	if snap.Sealed {
		sealed = "1"
	}
	args := make([]any, 0, 4+2*len(snap.Items))
	args = append(args, t.ttlMs(), snap.Total, sealed, completed)
	for it, failed := range snap.Items {
		if it == "" {
			return Decision{}, fmt.Errorf("progress: rebuild %.100q: %w: empty item id", id, ErrInvalidID)
		}
		f := "0"
		if failed {
			f = "1"
		}
		args = append(args, it, f)
	}
	return t.eval(ctx, "rebuild", rebuildScript, id, t.keys(id), args...)
}

// Get returns the job's state; a job without state has Status
// StatusNotFound and zero counters. A job id that CheckJobID refuses
// returns its error (wrapping ErrInvalidID): no job can have that id.
func (t *Tracker) Get(ctx context.Context, id string) (State, error) {
	if err := CheckJobID(id); err != nil {
		return State{}, fmt.Errorf("progress: get: %w", err)
	}
	m, err := t.rdb.HGetAll(ctx, t.Key(id)).Result()
	if err != nil {
		return State{}, fmt.Errorf("progress: get %s: %w", id, err)
	}
	if len(m) == 0 {
		return State{ID: id, Status: StatusNotFound}, nil
	}
	s := State{ID: id, Status: m["status"], Sealed: m["sealed"] == "1", Pending: m["pending"] == "1"}
	s.Total, _ = strconv.ParseInt(m["total"], 10, 64)
	s.Done, _ = strconv.ParseInt(m["done"], 10, 64)
	s.Errors, _ = strconv.ParseInt(m["errors"], 10, 64)
	if v := m["completed_at"]; v != "" {
		s.CompletedAt, _ = time.Parse(time.RFC3339Nano, v)
	}
	return s, nil
}
