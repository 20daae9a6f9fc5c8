package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/bench/internal/faults"
	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/topics"
)

// tradesLoad is trades' part of a scenario: one synthetic import per user
// (500 trades, 5 pages, each page fetched with a latency so that imports
// are under way at the fault), all sent at once; scoring and the weekly
// digests follow. What the input implies, per user: the synthetic
// broker's trades as rows (ext ids syn-00000 …), one import.completed
// (500 fetched and stored), bias_tags equal to the reference scoring
// (trades.Score) of the stored history, one digest per ISO week of the
// trades — a digests row of revision 1 whose aggregate equals
// trades.Aggregate of the week's scored trades, its object (exactly the
// trades.DigestObject of that row), and one digest.ready event — and no
// dead letter.
//
// Under the redis fault it also calls the sim's API on the member across
// the restart (sim.go): the trades of a user of its own (simUser, stored
// directly, not imported, and left out of the counts above); every answer
// must equal the reference, every error be clean, and the cache be used
// and written again after the restart (judgeSim). Under the minio fault
// the outage begins once every trade is stored and lasts until a digest
// write has failed.
type tradesLoad struct {
	users []string
	// since is the imports' since: the Monday two weeks ago, so that the
	// synthetic broker's 500 trades (bursts of 12 every 3 h, 5 days) fall
	// in one ISO week that has closed (a digest is emitted 1 h after its
	// week's end) and is within the digests' horizon (8 weeks).
	since string
	weeks map[string]bool // ISO week starts of a user's trades (the same for every user)

	fault    string
	simUser  string
	sim      *simTraffic // nil: no sim calls (every fault but redis)
	simCalls []simCall
}

func newTradesLoad(cfg *config) *tradesLoad {
	l := &tradesLoad{weeks: map[string]bool{}, since: trades.WeekOf(time.Now().UTC().AddDate(0, 0, -14)).StartDate()}
	n := max(1, int(20*cfg.scale))
	for i := range n {
		l.users = append(l.users, fmt.Sprintf("u%03d", i))
	}
	// The synthetic broker's trade i is at since + (i/12)·3 h + (i%12)·4 min.
	since, _ := time.Parse(time.DateOnly, l.since)
	for i := range trades.SyntheticTrades {
		ts := since.Add(time.Duration(i/12)*3*time.Hour + time.Duration(i%12)*4*time.Minute)
		l.weeks[trades.WeekOf(ts).StartDate()] = true
	}
	return l
}

func (l *tradesLoad) pipeline() string { return "trades" }
func (l *tradesLoad) sent() int        { return len(l.users) }
func (l *tradesLoad) unit() string     { return "trades + digests" }

func (l *tradesLoad) groups() map[string][]string {
	return map[string][]string{
		trades.ImportName: {topics.TradesImport},
		trades.ScoreName:  {topics.TradesEvents},
		trades.DigestName: {topics.TradesBias},
	}
}

func (l *tradesLoad) setup(ctx context.Context, sc *scene) error {
	// The users are the scenario's own: trades and digests are keyed by
	// user across the schema, and the runtime by user across partitions.
	for i := range l.users {
		l.users[i] = sc.id + "-" + l.users[i]
	}
	l.simUser = sc.id + "-sim"
	var recs []*kgo.Record
	for _, u := range l.users {
		b, err := json.Marshal(trades.ImportCommand{UserID: u, Since: l.since, Broker: trades.BrokerSynthetic,
			Options: &trades.SyntheticOptions{PageLatencyMS: 300}})
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: sc.topic(topics.TradesImport), Key: []byte(u), Value: b})
	}
	return sc.cl.ProduceSync(ctx, recs...).FirstErr()
}

// progress is the trades stored plus the digests rows written.
func (l *tradesLoad) progress(ctx context.Context, sc *scene) (done, want int64, err error) {
	var rows, digests int64
	if err := sc.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM trades WHERE user_id <> $1), (SELECT count(*) FROM digests)`, l.simUser).Scan(&rows, &digests); err != nil {
		return 0, 0, err
	}
	n := int64(len(l.users))
	return min(rows, n*trades.SyntheticTrades) + min(digests, n*int64(len(l.weeks))), n * (trades.SyntheticTrades + int64(len(l.weeks))), nil
}

// tradesLoad takes part in its faults (the runner finds it by a type
// assertion).
var _ faultAware = (*tradesLoad)(nil)

// startSide, under the redis fault, stores the sim user's trades, computes
// the reference answers and starts calling the sim on the first member.
func (l *tradesLoad) startSide(ctx context.Context, sc *scene, fault string) error {
	l.fault = fault
	if fault != "redis" {
		return nil
	}
	ids, err := seedSimUser(ctx, sc, l.simUser, l.since)
	if err != nil {
		return err
	}
	// 40 trades spread over the history: at one more every
	// simNewKeyEvery, more than a scenario needs.
	var pick []string
	for i := 0; i < len(ids) && len(pick) < 40; i += max(1, len(ids)/40) {
		pick = append(pick, ids[i])
	}
	if l.sim, err = newSimTraffic(ctx, sc, l.simUser, pick); err != nil {
		return fmt.Errorf("reference sim answers: %w", err)
	}
	l.sim.start(sc.members[0].ops)
	return nil
}

// faultReady holds the redis fault until a sim answer came from the
// cache, and the minio fault until every trade is stored (the digests,
// trades' only objects, come last; the outage then lasts until a digest
// write has failed).
func (l *tradesLoad) faultReady(ctx context.Context, sc *scene) bool {
	switch {
	case l.sim != nil:
		return l.sim.ready()
	case l.fault == "minio":
		var n int64
		err := sc.db.QueryRow(ctx, `SELECT count(*) FROM trades WHERE user_id <> $1`, l.simUser).Scan(&n)
		return err == nil && n >= int64(len(l.users))*trades.SyntheticTrades
	}
	return true
}

func (l *tradesLoad) stopSide() {
	if l.sim != nil {
		l.simCalls = l.sim.end()
	}
}

func (l *tradesLoad) verify(ctx context.Context, sc *scene, r *result) error {
	if l.sim != nil {
		v := judgeSim(l.simCalls, l.sim.want, sc.faultBegan, sc.faultEnded)
		r.add(v.answers)
		r.add(v.errs)
		r.add(v.cache)
		r.note("%s", v.summary)
		for _, n := range v.notes {
			r.note("%s", n)
		}
	}
	since, _ := time.Parse(time.DateOnly, l.since)
	rows := effect{kind: "trades rows"}
	tags := effect{kind: "bias_tags"}
	digests := effect{kind: "digests rows"}
	wantReady := map[string]bool{}
	wantObjects := map[string]objectCheck{}
	for _, u := range l.users {
		// Rows: the synthetic broker's ext ids, once each.
		history, err := trades.LoadHistory(ctx, sc.db, u)
		if err != nil {
			return fmt.Errorf("history of %s: %w", u, err)
		}
		rows.want += trades.SyntheticTrades
		rows.got += int64(len(history))
		seen := map[string]bool{}
		for _, t := range history {
			var i int
			if _, err := fmt.Sscanf(t.ExtID, "syn-%05d", &i); err != nil || i >= trades.SyntheticTrades || seen[t.ExtID] {
				rows.dup++
			}
			seen[t.ExtID] = true
		}
		for i := range trades.SyntheticTrades {
			if !seen[fmt.Sprintf("syn-%05d", i)] {
				rows.lost++
			}
		}
		// bias_tags: the reference scoring of the stored history.
		scored := trades.Score(history, since)
		want := map[string]bool{}
		weeks := map[string]map[string]trades.TradeScored{}
		wins := map[string]trades.Window{}
		for _, s := range scored {
			for _, lb := range s.LabelNames() {
				want[s.Trade.ID+"|"+lb] = true
			}
			w := trades.WeekOf(s.Trade.TS)
			if weeks[w.StartDate()] == nil {
				weeks[w.StartDate()], wins[w.StartDate()] = map[string]trades.TradeScored{}, w
			}
			weeks[w.StartDate()][s.Trade.ID] = s.Payload()
		}
		got, err := userTags(ctx, sc, u)
		if err != nil {
			return err
		}
		tags.want += int64(len(want))
		tags.got += int64(len(got))
		for k := range want {
			if !got[k] {
				tags.lost++
			}
		}
		for k := range got {
			if !want[k] {
				tags.dup++
			}
		}
		// Digests: per week, revision 1 with the week's aggregate.
		for start, w := range wins {
			digests.want++
			wantReady[trades.DigestReadyEventID(u, start, 1)] = true
			agg := trades.Aggregate(w, weeks[start])
			wantObjects[trades.DigestObjectKey(u, w)] = sameJSON(trades.DigestObject{UserID: u, Period: w.Period(), Revision: 1, Agg: agg})
			var revision int
			var partial bool
			var stored json.RawMessage
			err := sc.db.QueryRow(ctx, `SELECT revision, partial, agg FROM digests WHERE user_id = $1 AND period_start = $2`, u, start).Scan(&revision, &partial, &stored)
			if err != nil {
				digests.lost++
				r.note("%s %s: no digests row (%v)", u, start, err)
				continue
			}
			if revision > 1 {
				digests.dup++ // emitted again as a new revision
			}
			if err := sameJSON(agg)(stored); err != nil || partial {
				digests.lost++
				r.note("%s %s: digests row revision %d, partial %t, aggregate differs from the scored trades' (%v)", u, start, revision, partial, err)
			}
		}
	}
	var n int64
	if err := sc.db.QueryRow(ctx, `SELECT count(*) FROM digests`).Scan(&n); err != nil {
		return err
	}
	digests.got = n
	digests.dup += max(0, n-digests.want)
	// Digest objects: exactly the wanted keys, each with its row's content.
	objects, err := checkObjects(ctx, sc.objects, "digests/", "digest objects", wantObjects, r)
	if err != nil {
		return err
	}
	r.add(rows)
	r.add(tags)
	r.add(digests)
	r.add(objects)

	// digest.ready: once per (user, week, revision 1).
	ready := effect{kind: "digest.ready events", want: int64(len(wantReady))}
	readySeen := map[string]int{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.DigestReady), func(rec *kgo.Record) {
		ready.got++
		e, err := trades.DecodeEvent(rec.Value)
		if err != nil {
			r.note("undecodable digest.ready: %v", err)
			return
		}
		readySeen[e.EventID]++
	}); err != nil {
		return err
	}
	for id, c := range readySeen {
		if !wantReady[id] {
			ready.dup += int64(c)
			continue
		}
		ready.dup += int64(c - 1)
	}
	for id := range wantReady {
		if readySeen[id] == 0 {
			ready.lost++
		}
	}
	r.add(ready)

	// import.completed: one per user's import, all trades stored.
	completed := effect{kind: "import.completed events", want: int64(len(l.users))}
	per := map[string]int{}
	if err := faults.ReadCommitted(ctx, sc.adm, sc.kopts, sc.topic(topics.TradesEvents), func(rec *kgo.Record) {
		e, err := trades.DecodeEvent(rec.Value)
		if err != nil || e.Type != trades.TypeImportCompleted {
			return
		}
		completed.got++
		p, err := trades.DecodePayload[trades.ImportCompleted](e)
		if err != nil {
			r.note("undecodable import.completed: %v", err)
			return
		}
		per[p.UserID]++
		if p.Fetched != trades.SyntheticTrades || p.Stored != trades.SyntheticTrades || p.Rejected != 0 {
			r.note("import.completed of %s: fetched %d, stored %d, rejected %d", p.UserID, p.Fetched, p.Stored, p.Rejected)
		}
	}); err != nil {
		return err
	}
	for _, u := range l.users {
		if per[u] == 0 {
			completed.lost++
		}
		completed.dup += int64(max(0, per[u]-1))
	}
	r.add(completed)

	dl := effect{kind: "dead letters"}
	records, distinct, err := faults.DLQCoordinates(ctx, sc.adm, sc.kopts, sc.topic(topics.TradesDLQ))
	if err != nil {
		return err
	}
	dl.got, dl.dup = int64(records), int64(records-distinct)
	r.add(dl)
	return nil
}

// userTags is the user's bias_tags as "trade_id|label".
func userTags(ctx context.Context, sc *scene, user string) (map[string]bool, error) {
	rows, err := sc.db.Query(ctx, `SELECT b.trade_id::text || '|' || b.label FROM bias_tags b
		JOIN trades tr ON tr.id = b.trade_id WHERE tr.user_id = $1`, user)
	if err != nil {
		return nil, fmt.Errorf("bias_tags of %s: %w", user, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out[s] = true
	}
	return out, rows.Err()
}
