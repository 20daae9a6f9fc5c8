package silver

import "time"

// MergeTA returns the ta_silver row that results from applying next on top of
// the stored row old, exactly as the upsert of [TATable] does: every value
// column takes next's value (NULLs included), first_seen_time keeps the
// earliest non-NULL time (SQL LEAST ignores NULLs; the zero time is NULL).
// ingest_time is the database's business; the result carries next's.
//
// Used to merge several records of one key in one batch before the upsert,
// and as the reference model in tests. old and next must have the same key.
func MergeTA(old, next TARow) TARow {
	out := next
	out.FirstSeenTime = least(old.FirstSeenTime, next.FirstSeenTime)
	return out
}

// MergeSA returns the sa_silver row that results from applying next on top of
// the stored row old, exactly as the upsert of [SATable] does:
//
//   - url_canonical and source_domain keep the stored values;
//   - publisher_time and first_seen_time keep the earliest (LEAST);
//   - title, text_normalized, author, hype_raw, hype_crowd, hype_elitist and
//     account_weights_applied take next's value when it is not NULL, else the
//     stored one (COALESCE);
//   - language likewise, except that a new "unknown" never replaces a stored
//     non-NULL language;
//   - symbols and topic_tags take next's array only when it has at least one
//     element (array_length(…, 1) IS NOT NULL), else the stored one;
//   - content_hash takes next's value.
//
// ingest_time is the database's business; the result carries next's.
func MergeSA(old, next SARow) SARow {
	out := old
	out.PublisherTime = earliest(old.PublisherTime, next.PublisherTime)
	out.FirstSeenTime = earliest(old.FirstSeenTime, next.FirstSeenTime)
	switch {
	case next.Language == nil:
	case *next.Language == LanguageUnknown && old.Language != nil:
	default:
		out.Language = next.Language
	}
	out.Title = coalesce(next.Title, old.Title)
	out.TextNormalized = coalesce(next.TextNormalized, old.TextNormalized)
	out.Author = coalesce(next.Author, old.Author)
	out.HypeRaw = coalesce(next.HypeRaw, old.HypeRaw)
	out.HypeCrowd = coalesce(next.HypeCrowd, old.HypeCrowd)
	out.HypeElitist = coalesce(next.HypeElitist, old.HypeElitist)
	out.AccountWeightsApplied = coalesce(next.AccountWeightsApplied, old.AccountWeightsApplied)
	if len(next.Symbols) > 0 {
		out.Symbols = next.Symbols
	}
	if len(next.TopicTags) > 0 {
		out.TopicTags = next.TopicTags
	}
	out.ContentHash = next.ContentHash
	out.IngestTime = next.IngestTime
	return out
}

// least is SQL LEAST over nullable times (zero = NULL): NULLs are ignored.
func least(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case b.Before(a):
		return b
	}
	return a
}

// earliest is SQL LEAST over times that are never NULL (sa_silver's NOT
// NULL columns): the zero time is 0001-01-01 00:00 UTC, a time a record may
// carry and the upsert compares like any other, not NULL.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func coalesce[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}
