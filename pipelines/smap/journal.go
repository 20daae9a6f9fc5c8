package smap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// crawlJournal is the durable list of a project's items
// (projects/{id}.items.json in the object store): every item whose raw
// object the collector stored, with what its data.collected announcement
// needs, in the order the items were first journaled. An item enters the
// journal before the progress tracker counts it (Tracker.Discover); the
// collector seals the total at exactly the journal's length
// (Tracker.SealExact) and announces the first total items of the journal,
// then and again, without crawling, when the sealing record comes back
// because the transaction carrying the announcements aborted.
type crawlJournal struct {
	ProjectID string         `json:"project_id"`
	Items     []journalEntry `json:"items"`
}

// journalEntry is one item of a crawlJournal.
type journalEntry struct {
	ItemID    string    `json:"item_id"`
	Platform  string    `json:"platform"`
	ObjectKey string    `json:"object_key"`
	CrawledAt time.Time `json:"crawled_at"`
}

// journalKey is the journal's object name: the meta object's with
// ".items" before ".json" (a project id of maxProjectIDLen bytes escapes
// to at most 240, so the name stays within 255 bytes).
func journalKey(projectID string) string {
	return "projects/" + url.PathEscape(projectID) + ".items.json"
}

// readJournal returns the project's journal, empty when there is none.
func readJournal(ctx context.Context, st objstore.Store, projectID string) (crawlJournal, error) {
	return readJSON(ctx, st, journalKey(projectID), "crawl journal "+projectID, crawlJournal{ProjectID: projectID})
}

// addToJournal adds entries to the project's journal (an entry replaces
// the one of the same item; new ones go to the end) and returns the
// journal written. It reads the journal first, so that entries another
// writer added (a member that lost the partition but has not stopped yet)
// are kept, unless that writer writes between this read and this write:
// the object store has no conditional write here, so one of the two
// writes is lost.
func addToJournal(ctx context.Context, st objstore.Store, projectID string, entries []journalEntry) (crawlJournal, error) {
	j, err := readJournal(ctx, st, projectID)
	if err != nil {
		return j, err
	}
	at := make(map[string]int, len(j.Items))
	for i, e := range j.Items {
		at[e.ItemID] = i
	}
	for _, e := range entries {
		if i, ok := at[e.ItemID]; ok {
			j.Items[i] = e
			continue
		}
		at[e.ItemID] = len(j.Items)
		j.Items = append(j.Items, e)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return j, fmt.Errorf("encode crawl journal %s: %w", projectID, err)
	}
	if err := st.Put(ctx, journalKey(projectID), b, "application/json"); err != nil {
		return j, fmt.Errorf("write crawl journal %s: %w", projectID, err)
	}
	return j, nil
}

// announcements returns the data.collected announcement of every item of
// j, in journal order, with the project's keywords.
func (j crawlJournal) announcements(keywords []string) ([]collected, error) {
	out := make([]collected, 0, len(j.Items))
	for _, e := range j.Items {
		b, err := json.Marshal(Event[DataCollected]{EventID: collectedEventID(e.ItemID), Timestamp: e.CrawledAt, Payload: DataCollected{
			ProjectID: j.ProjectID, ItemID: e.ItemID, Platform: e.Platform, ObjectKey: e.ObjectKey, CrawledAt: e.CrawledAt, Keywords: keywords,
		}})
		if err != nil {
			return nil, fmt.Errorf("encode data.collected %s: %w", e.ItemID, err)
		}
		out = append(out, collected{item: e.ItemID, value: b})
	}
	return out, nil
}
