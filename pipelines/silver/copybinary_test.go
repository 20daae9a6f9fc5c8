package silver

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/pgsink"
)

// The silver tables' binary COPY encoding (TATable/SATable AppendCopy)
// stores exactly what pgx's encoding of their Values stores, for the rows
// of a corpus written in batches (new keys copied directly, repeated keys
// upserted through the staging table).
func TestBinaryCopyTablesStoreWhatValuesStore(t *testing.T) {
	t.Parallel()
	srv := testkit.NewPostgresServer(t)
	byValuesTA, byValuesSA := TATable(), SATable()
	byValuesTA.AppendCopy, byValuesTA.KeyValues = nil, nil
	byValuesSA.AppendCopy, byValuesSA.KeyValues = nil, nil
	if TATable().AppendCopy == nil || SATable().AppendCopy == nil {
		t.Fatal("the silver tables have no binary COPY encoding")
	}
	rows := corpusRows(t, 5, 3000, 300)
	type stored struct {
		ta map[string]TARow
		sa map[string]SARow
	}
	write := func(ta pgsink.Table[TARow], sa pgsink.Table[SARow]) stored {
		ctx, pg := migrated(t, srv)
		taSink, err := pgsink.New(pg.Pool, ta)
		if err != nil {
			t.Fatal(err)
		}
		saSink, err := pgsink.New(pg.Pool, sa)
		if err != nil {
			t.Fatal(err)
		}
		sink := &router{ta: taSink, sa: saSink}
		for from := 0; from < len(rows); from += 500 {
			if err := sink.Write(ctx, rows[from:min(from+500, len(rows))]); err != nil {
				t.Fatal(err)
			}
		}
		return stored{withoutIngest(readTA(t, ctx, pg.Pool), clearTA), withoutIngest(readSA(t, ctx, pg.Pool), clearSA)}
	}
	got, want := write(TATable(), SATable()), write(byValuesTA, byValuesSA)
	if len(want.ta) < 100 || len(want.sa) < 100 {
		t.Fatalf("only %d ta and %d sa rows", len(want.ta), len(want.sa))
	}
	if !reflect.DeepEqual(got.ta, want.ta) {
		t.Errorf("ta_silver: the binary COPY stored other rows than pgx's encoding of Values")
	}
	if !reflect.DeepEqual(got.sa, want.sa) {
		t.Errorf("sa_silver: the binary COPY stored other rows than pgx's encoding of Values")
	}
}
