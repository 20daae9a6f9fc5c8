package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/sinks/objstore"
)

// A pipeline instruments the store it was given with its own label; the
// metrics land on the registry its ops server serves. A missing key is a
// not_found result, not an error.
func ExampleInstrument() {
	dir, err := os.MkdirTemp("", "objstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	d, err := objstore.NewDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	store, err := objstore.Instrument(d, reg, "ticks")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := store.Put(ctx, "ticks/FPT/2024-05-02/part_1_a.parquet", []byte("PAR1 rows PAR1"), "application/vnd.apache.parquet"); err != nil {
		fmt.Println(err)
		return
	}
	_, err = store.Get(ctx, "ticks/FPT/2024-05-02/part_2_a.parquet")
	fmt.Println("missing:", errors.Is(err, objstore.ErrNotFound))

	// Print the counters that moved.
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				var labels []string
				for _, lp := range m.GetLabel() {
					labels = append(labels, lp.GetName()+"="+lp.GetValue())
				}
				fmt.Printf("%s{%s} %g\n", mf.GetName(), strings.Join(labels, ","), v)
			}
		}
	}
	// Output:
	// missing: true
	// sluice_objstore_operations_total{backend=dir,op=get,pipeline=ticks,result=not_found} 1
	// sluice_objstore_operations_total{backend=dir,op=put,pipeline=ticks,result=ok} 1
	// sluice_objstore_written_bytes_total{backend=dir,pipeline=ticks} 14
}
