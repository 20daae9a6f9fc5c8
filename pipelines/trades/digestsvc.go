package trades

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/sinks/objstore"
	"github.com/sluicehq/sluice/stages"
	"github.com/sluicehq/sluice/stages/run"
)

// digestEntry is a value of the digest store (see digeststate.go): a
// window's state (key W|user|start) or its contributions (key
// C|user|start, with the user id the encoding needs). Exactly one of
// Window and Contribs is set.
type digestEntry struct {
	Window   *WindowState
	User     string
	Contribs windowContribs
}

func encodeDigestEntry(e digestEntry) ([]byte, error) {
	switch {
	case e.Window != nil:
		return encodeWindowState(*e.Window)
	case e.Contribs != nil:
		return encodeContribs(e.User, e.Contribs), nil
	}
	return nil, errors.New("digest store: empty entry")
}

func decodeDigestEntry(b []byte) (digestEntry, error) {
	if len(b) == 0 {
		return digestEntry{}, errors.New("digest store entry: empty value")
	}
	switch b[0] {
	case tagWindowJSON, tagWindow:
		var w WindowState
		var err error
		if b[0] == tagWindow {
			w, err = decodeBinaryWindowState(string(b)) // an earlier layout
		} else {
			w, err = decodeWindowState(b)
		}
		if err != nil {
			return digestEntry{}, err
		}
		return digestEntry{Window: &w}, nil
	case tagContribs, tagContribsSorted:
		user, m, err := decodeContribs(string(b))
		if err != nil {
			return digestEntry{}, err
		}
		return digestEntry{User: user, Contribs: m}, nil
	}
	return digestEntry{}, fmt.Errorf("digest store entry: unknown tag %q (a changelog of an earlier layout is not read: see docs/pipelines/trades-score-digest.md)", b[0])
}

// NewDigestStore declares the digest store on its changelog topic
// (compacted, co-partitioned with trades.bias). Among the records of a key
// a restore keeps the one with the greatest fencing token. Values are
// encoded when they are flushed (the contributions of a window change in
// place, record after record).
func NewDigestStore(topic string) (*run.Store[digestEntry], error) {
	return run.NewStore(run.StoreConfig[digestEntry]{
		Name: "digest", Topic: topic, Encode: encodeDigestEntry, Decode: decodeDigestEntry,
		Fold: run.KeepGreatest[digestEntry], Group: digestGroup, EncodeAtFlush: true,
	})
}

// digestGroup groups the digest store's keys as they are read: a user's
// contribution sets (C|user|) and the window states (W|). User ids hold
// no '|'.
func digestGroup(key string) string {
	if rest, ok := strings.CutPrefix(key, "C|"); ok {
		if i := strings.IndexByte(rest, '|'); i >= 0 {
			return key[:2+i+1]
		}
		return ""
	}
	if strings.HasPrefix(key, "W|") {
		return "W|"
	}
	return ""
}

// digestIn is a decoded trades.bias record.
type digestIn struct {
	skip    bool
	scored  *TradeScored
	request *DigestRequest
}

// decodeDigestIn decodes trades.bias for trades-digest: trade.scored
// (rule trades.scored) and digest.request; other known types are skipped.
// A trade.scored of the shape trades-score writes is decoded in one pass
// (decodeScoredFast); every other value, malformed ones included, by
// decodeDigestInJSON, which decides its dead letter's reason and rule.
func decodeDigestIn(key, value []byte) (digestIn, error) {
	if s, ok := decodeScoredFast(value); ok {
		return digestIn{scored: &s}, nil
	}
	return decodeDigestInJSON(key, value)
}

// decodeDigestInJSON is decodeDigestIn by DecodeEvent, DecodeTradeScored
// and DecodePayload.
func decodeDigestInJSON(_, value []byte) (digestIn, error) {
	e, err := DecodeEvent(value)
	if err != nil {
		return digestIn{}, err
	}
	switch e.Type {
	case TypeTradeScored:
		s, err := DecodeTradeScored(e.Payload)
		if err != nil {
			return digestIn{}, err
		}
		return digestIn{scored: &s}, nil
	case TypeDigestRequest:
		r, err := DecodePayload[DigestRequest](e)
		if err != nil {
			return digestIn{}, err
		}
		return digestIn{request: &r}, nil
	}
	return digestIn{skip: true}, nil
}

// Emission kinds (label kind of sluice_trades_digests_emitted_total).
const (
	emitFirst     = "first"
	emitRevision  = "revision"
	emitRequested = "requested"
)

// digestOut is one digest to emit: the object, the digests row and
// digest.ready, in that order (digestSink).
type digestOut struct {
	userID   string
	window   Window
	revision int
	partial  bool
	agg      Agg
	kind     string
	// recheck is set for a revision whose digest.ready may already be on
	// the topic (a window restored with Publishing set): the sink
	// publishes it only when no record of its event id timestamped from
	// recheck on is there.
	recheck time.Time
}

// digester is trades-digest's stage and timer. It is safe for concurrent
// use (each partition's calls come from its worker, one at a time).
type digester struct {
	cfg   DigestConfig
	store *run.Store[digestEntry]
	m     *digestMetrics

	mu      sync.Mutex
	windows map[int32]int       // windows per owned partition (digest_windows)
	due     map[int32]*dueIndex // the windows of each owned partition by checkAt
}

// stage applies one trade.scored or digest.request. A trade.scored
// replaces the trade's contribution; when it changes, the trade's window
// (and the window it left, if its ts moved) gets a pending revision and
// its last change is now. A trade.scored whose contribution equals the
// stored one changes nothing. A digest.request emits the window at once.
func (d *digester) stage(ctx context.Context, m stages.Msg[digestIn]) ([]digestOut, error) {
	in := m.Value
	if in.skip {
		return nil, nil
	}
	part, err := d.store.Of(ctx)
	if err != nil {
		return nil, err
	}
	now := d.cfg.Now().UTC()
	if in.request != nil {
		return d.request(part, m.Key, *in.request, now)
	}
	c := *in.scored
	if c.UserID == "" {
		c.UserID = m.Key
	}
	if err := CheckUserID(c.UserID); err != nil {
		return nil, err
	}
	if err := CheckKey(m.Key, c.UserID); err != nil {
		return nil, err
	}
	c.TS = c.TS.UTC()
	w := WeekOf(c.TS)
	if err := CheckWindowOpen(w, now, d.cfg.Horizon); err != nil {
		return nil, err
	}
	key, enc := encodeContrib(c.UserID, contribOf(c))
	cur := d.contribs(part, c.UserID, w)
	old, had := cur[key]
	if had && old == enc {
		return nil, nil // a redelivery or a re-score that changed nothing
	}
	touched := []Window{w}
	if !had {
		// A trade seen before in another window (its ts moved) leaves it.
		var moved []string
		part.Range("C|"+c.UserID+"|", func(k string, e digestEntry) bool {
			if _, in := e.Contribs[key]; in && k != ContributionsKey(c.UserID, w) {
				moved = append(moved, k)
			}
			return true
		})
		for _, k := range moved {
			e, _ := part.Get(k)
			delete(e.Contribs, key)
			if err := part.Put(k, e); err != nil {
				return nil, err
			}
			_, start, _ := splitStateKey(k, "C|")
			if ow, err := WindowStarting(start); err == nil && CheckWindowOpen(ow, now, d.cfg.Horizon) == nil {
				touched = append(touched, ow)
			}
		}
	}
	cur[key] = enc
	if err := part.Put(ContributionsKey(c.UserID, w), digestEntry{User: c.UserID, Contribs: cur}); err != nil {
		return nil, err
	}
	for _, tw := range touched {
		st := d.window(part, c.UserID, tw)
		if st.Revision <= st.EmittedRevision {
			st.Revision = st.EmittedRevision + 1
		}
		st.LastChange = now
		if err := d.putWindow(part, c.UserID, tw, st); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// contribs returns the contributions of the user's window w, to change in
// place and Put again (an empty set when it has none).
func (d *digester) contribs(part *run.Partition[digestEntry], userID string, w Window) windowContribs {
	if e, ok := part.Get(ContributionsKey(userID, w)); ok && e.Contribs != nil {
		return e.Contribs
	}
	return windowContribs{}
}

// window returns the state of the user's window w (zero when none).
func (d *digester) window(part *run.Partition[digestEntry], userID string, w Window) WindowState {
	e, ok := part.Get(WindowStateKey(userID, w))
	if !ok || e.Window == nil {
		return WindowState{}
	}
	return *e.Window
}

// request emits the window a digest.request names at once: partial when
// the week has not ended, all zeros when it has no trades. A request that
// finds the window as last emitted re-emits that revision (same event
// id); otherwise it emits the next one.
func (d *digester) request(part *run.Partition[digestEntry], key string, r DigestRequest, now time.Time) ([]digestOut, error) {
	if r.UserID == "" {
		r.UserID = key
	}
	if err := CheckUserID(r.UserID); err != nil {
		return nil, err
	}
	if err := CheckKey(key, r.UserID); err != nil {
		return nil, err
	}
	w, err := WindowStarting(r.PeriodStart)
	if err != nil {
		return nil, stages.DeadLetter(stages.ReasonSanityFail, "", fmt.Errorf("digest.request: %w", err))
	}
	if err := CheckWindowOpen(w, now, d.cfg.Horizon); err != nil {
		return nil, err
	}
	out, err := d.emit(part, r.UserID, w, now, true)
	if err != nil || out == nil {
		return nil, err
	}
	outs := []digestOut{*out}
	return outs, d.announce(part, outs)
}

// emit computes the user's window w and records its emission in the
// window's state (written to the changelog after the sink wrote the
// emission). Without force (the timer) an aggregate and partial flag
// equal to the last emitted ones emit nothing: the pending revision is
// dropped. With force (a request) they re-emit the last revision.
//
// A fresh emission leaves the window's state with Publishing set (see
// WindowState): announce makes it durable before the sink publishes. A
// window restored with Publishing set is emitted again as it was, to be
// published only if it is not on the topic (digestOut.recheck).
func (d *digester) emit(part *run.Partition[digestEntry], userID string, w Window, now time.Time, force bool) (*digestOut, error) {
	cur := d.contribs(part, userID, w)
	in := make([]contrib, 0, len(cur))
	for key, enc := range cur {
		c, _, err := decodeContrib(userID, key, enc)
		if err != nil {
			return nil, stages.Fatal(fmt.Errorf("the digest store of %s %s: %w", userID, w.StartDate(), err))
		}
		in = append(in, c)
	}
	agg := aggregate(w, in)
	aj, err := json.Marshal(agg)
	if err != nil {
		return nil, fmt.Errorf("encode the digest of %s %s: %w", userID, w.StartDate(), err)
	}
	sum := sha256.Sum256(aj)
	hash := hex.EncodeToString(sum[:16])
	partial := now.Before(w.End)
	st := d.window(part, userID, w)
	if st.Publishing {
		out := &digestOut{userID: userID, window: w, revision: st.EmittedRevision, partial: st.EmittedPartial, agg: agg,
			kind: emitRevision, recheck: st.PublishMark}
		if st.EmittedRevision == 1 {
			out.kind = emitFirst
		}
		st.Publishing, st.PublishMark = false, time.Time{}
		return out, d.putWindow(part, userID, w, st)
	}
	same := st.EmittedRevision > 0 && st.EmittedAgg == hash && st.EmittedPartial == partial
	kind := emitRequested
	switch {
	case same && !force:
		st.Revision = st.EmittedRevision
		return nil, d.putWindow(part, userID, w, st)
	case same:
		// re-emit the last revision as it was
	case st.EmittedRevision == 0:
		st.EmittedRevision = 1
		if !force {
			kind = emitFirst
		}
	default:
		st.EmittedRevision++
		if !force {
			kind = emitRevision
		}
	}
	st.Revision, st.EmittedAgg, st.EmittedPartial = st.EmittedRevision, hash, partial
	st.Publishing, st.PublishMark = true, time.Now() // wall clock, as the records' timestamps
	if st.LastChange.IsZero() {
		st.LastChange = now
	}
	if err := d.putWindow(part, userID, w, st); err != nil {
		return nil, err
	}
	return &digestOut{userID: userID, window: w, revision: st.Revision, partial: partial, agg: agg, kind: kind}, nil
}

// announce makes the Publishing marks of the fresh emissions among outs
// durable now (the store's Flush: before the sink publishes them), then
// clears them; the cleared states are written after the sink, with the
// batch or firing. A crash in between leaves the mark: the next owner
// rechecks the topic instead of publishing the same revision again.
func (d *digester) announce(part *run.Partition[digestEntry], outs []digestOut) error {
	var fresh []digestOut
	for _, o := range outs {
		if o.recheck.IsZero() {
			fresh = append(fresh, o)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	if err := part.Flush(); err != nil {
		return err
	}
	for _, o := range fresh {
		st := d.window(part, o.userID, o.window)
		st.Publishing, st.PublishMark = false, time.Time{}
		if err := d.putWindow(part, o.userID, o.window, st); err != nil {
			return err
		}
	}
	return nil
}

// tick is the partition's periodic timer: it emits every window that is
// due (now ≥ end + Grace, its last change Settle old, and a pending
// revision or a partial last emission) and forgets windows Horizon past
// their end, with their contributions. It visits only the windows whose
// checkAt has come (dueIndex), in key order, and decides each by actionAt.
func (d *digester) tick(ctx context.Context, _ run.Firing) ([]digestOut, error) {
	part, err := d.store.Of(ctx)
	if err != nil {
		return nil, err
	}
	now := d.cfg.Now().UTC()
	due := d.dueOf(part)
	keys := due.popDue(now)
	var outs []digestOut
	for i, key := range keys {
		e, ok := part.Get(key)
		user, start, okKey := splitStateKey(key, "W|")
		w, werr := WindowStarting(start)
		if !ok || e.Window == nil || !okKey || werr != nil {
			continue // not a window (any more): no longer indexed
		}
		act := d.cfg.actionAt(w, *e.Window, now)
		switch act {
		case actForget:
			err = d.forget(part, user, w)
		case actEmit:
			var out *digestOut
			if out, err = d.emit(part, user, w, now, false); out != nil {
				outs = append(outs, *out)
			}
		}
		if act != actForget {
			// emit indexed the states it wrote; this indexes the others.
			if cur, ok := part.Get(key); ok && cur.Window != nil {
				due.set(key, d.cfg.checkAt(w, *cur.Window))
			}
		}
		if err != nil {
			d.reindex(part, due, keys[i:])
			return outs, err
		}
	}
	d.mu.Lock()
	d.windows[part.Partition()] = due.len()
	d.mu.Unlock()
	return outs, d.announce(part, outs)
}

// reindex indexes again the windows of keys (popped, not yet decided).
func (d *digester) reindex(part *run.Partition[digestEntry], due *dueIndex, keys []string) {
	for _, key := range keys {
		e, ok := part.Get(key)
		_, start, okKey := splitStateKey(key, "W|")
		w, err := WindowStarting(start)
		if ok && e.Window != nil && okKey && err == nil {
			due.set(key, d.cfg.checkAt(w, *e.Window))
		}
	}
}

// forget tombstones the user's window w and its contributions.
func (d *digester) forget(part *run.Partition[digestEntry], userID string, w Window) error {
	if err := part.Delete(ContributionsKey(userID, w)); err != nil {
		return err
	}
	key := WindowStateKey(userID, w)
	if err := part.Delete(key); err != nil {
		return err
	}
	d.dueOf(part).remove(key)
	return nil
}

// revoked drops the window counts of partitions this member lost.
func (d *digester) revoked(_ context.Context, revoked map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ps := range revoked {
		for _, p := range ps {
			delete(d.windows, p)
			delete(d.due, p)
		}
	}
}

// windowCount is the digest_windows gauge: the windows of the owned
// partitions, as their last timer firing counted them.
func (d *digester) windowCount() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.windows {
		n += c
	}
	return float64(n)
}

// digestSink emits digests in the order that makes a crash repeat, never
// lose, an emission: the object (digests/{user}/{start}-{end}.json), the
// digests row (upserted unless it holds a later revision), digest.ready
// (event id dr-{user}-{start}-r{rev}, acknowledged); the runtime then
// writes the window's emitted_revision to the changelog.
type digestSink struct {
	cfg     DigestConfig
	db      *pgxpool.Pool
	objects objstore.Store
	prod    *kgo.Client
	kopts   []kgo.Opt // connection options, to recheck digest.ready
	m       *digestMetrics
}

func (s *digestSink) Write(ctx context.Context, batch []digestOut) error {
	var rej stages.Rejections
	var recs []*kgo.Record
	var kinds []string
	// Revisions whose digest.ready may be on the topic already (a window
	// restored mid-publish) are published only if they are not.
	want, since := map[string]bool{}, time.Time{}
	for _, o := range batch {
		if !o.recheck.IsZero() {
			want[DigestReadyEventID(o.userID, o.window.StartDate(), o.revision)] = true
			if since.IsZero() || o.recheck.Before(since) {
				since = o.recheck
			}
		}
	}
	var published map[string]bool
	if len(want) > 0 {
		var err error
		if published, err = readyPublished(ctx, s.kopts, s.cfg.ReadyTopic, since, want); err != nil {
			return err
		}
	}
	for i, o := range batch {
		rec, err := s.write(ctx, o)
		var pe *pgconn.PgError
		switch {
		case err == nil && published[DigestReadyEventID(o.userID, o.window.StartDate(), o.revision)]:
			// on the topic already: not again
		case err == nil:
			recs, kinds = append(recs, rec), append(kinds, o.kind)
		case errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")):
			rej.Items = append(rej.Items, stages.Rejection{Index: i, Rule: "pg." + pe.Code, Err: err})
		default:
			return err
		}
	}
	if len(recs) > 0 {
		if err := s.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("produce %d digest.ready: %w", len(recs), err)
		}
	}
	for _, k := range kinds {
		s.m.emitted.WithLabelValues(k).Inc()
	}
	if len(rej.Items) > 0 {
		return &rej
	}
	return nil
}

// write stores o's object and row and returns its digest.ready record.
func (s *digestSink) write(ctx context.Context, o digestOut) (*kgo.Record, error) {
	key := DigestObjectKey(o.userID, o.window)
	body, err := json.Marshal(DigestObject{UserID: o.userID, Period: o.window.Period(), Revision: o.revision, Partial: o.partial, Agg: o.agg})
	if err != nil {
		return nil, fmt.Errorf("encode digest %s: %w", key, err)
	}
	if err := s.objects.Put(ctx, key, body, "application/json"); err != nil {
		if fatal := pipelines.StoreConfigError(DigestName, "digest "+key, err); fatal != nil {
			return nil, fatal
		}
		return nil, fmt.Errorf("put digest %s: %w", key, err)
	}
	aj, err := json.Marshal(o.agg)
	if err != nil {
		return nil, fmt.Errorf("encode digest %s: %w", key, err)
	}
	var id int64
	err = s.db.QueryRow(ctx, `INSERT INTO digests (user_id, period_start, period_end, revision, partial, agg, object_key, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now())
		ON CONFLICT (user_id, period_start) DO UPDATE SET period_end = EXCLUDED.period_end, revision = EXCLUDED.revision,
			partial = EXCLUDED.partial, agg = EXCLUDED.agg, object_key = EXCLUDED.object_key, updated_at = now()
		WHERE digests.revision <= EXCLUDED.revision
		RETURNING id`, o.userID, o.window.Start, o.window.End, o.revision, o.partial, string(aj), key).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row holds a later revision (a replay behind a newer emission).
		err = s.db.QueryRow(ctx, `SELECT id FROM digests WHERE user_id = $1 AND period_start = $2`, o.userID, o.window.Start).Scan(&id)
	}
	if err != nil {
		return nil, fmt.Errorf("upsert digest %s r%d: %w", key, o.revision, err)
	}
	v, err := json.Marshal(Event[DigestReady]{
		EventID: DigestReadyEventID(o.userID, o.window.StartDate(), o.revision), Type: TypeDigestReady, Timestamp: s.cfg.Now().UTC(),
		Payload: DigestReady{DigestID: id, UserID: o.userID, Period: o.window.Period(), Revision: o.revision, ObjectKey: key, Partial: o.partial},
	})
	if err != nil {
		return nil, fmt.Errorf("encode digest.ready %s: %w", key, err)
	}
	return &kgo.Record{Topic: s.cfg.ReadyTopic, Key: []byte(o.userID), Value: v}, nil
}
