package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/testvm"
)

// dumpWorkload is testdata/heap_dump.rb with heapExtra more objects: it
// times its own ObjectSpace.dump_all of that heap, then sleeps.
var dumpWorkload = newRubyWorkload()

// BenchmarkHeapDump times `rbscope heap dump`'s work on a heap of over a
// million objects: pause to copy the process's memory, resume, write every
// object with its references to a file from the copy. It reports
// objects/s, the time the target stood still, that time against what
// ObjectSpace.dump_all took in the process for the same heap (target:
// 0.15 at most), the bytes copied, and rbscope's memory (the copy and
// its peak Go heap) against them (target: 2 at most).
//
//	go test ./bench -run '^$' -bench HeapDump -benchtime 5x
func BenchmarkHeapDump(b *testing.B) {
	dumpWorkload.ready(b, "heap_dump.rb", func(dir string) []string {
		return []string{filepath.Join(dir, "dump_all.json"), fmt.Sprint(heapExtra)}
	}, 120*time.Second)
	var rep struct {
		DumpSeconds float64 `json:"dump_seconds"`
	}
	if err := json.Unmarshal(dumpWorkload.report, &rep); err != nil {
		b.Fatal(err)
	}
	os.Remove(filepath.Join(dumpWorkload.dir, "dump_all.json"))
	t, vm := testvm.Attach(b, dumpWorkload.pid)
	waitAsleep(b, t, vm)
	path := filepath.Join(dumpWorkload.dir, "rbscope.json")
	var objects uint64
	var paused time.Duration
	var size, copied, held int64
	var peak uint64
	dump := func() {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		w := bufio.NewWriterSize(f, 1<<20)
		vm.ForgetCaches()
		st, ss, err := heapdump.WriteSnapshot(vm, t, w, heapdump.Options{})
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			b.Fatal(err)
		}
		paused += ss.Paused
		copied, held = ss.Bytes, ss.Held
		if st.Objects < 1_000_000 || st.Skipped != 0 {
			b.Fatalf("dump wrote %d objects, skipped %d; want over a million, none skipped", st.Objects, st.Skipped)
		}
		objects += st.Objects
		size = st.Bytes
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i == 0 {
			peak = peakHeap(dump)
		} else {
			dump()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(objects)/float64(b.N), "objects/op")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(objects)/s, "objects/s")
	}
	pausedMS := paused.Seconds() * 1000 / float64(b.N)
	b.ReportMetric(pausedMS, "paused-ms/op")
	b.ReportMetric(rep.DumpSeconds*1000, "dump_all-ms")
	if rep.DumpSeconds > 0 {
		b.ReportMetric(pausedMS/(rep.DumpSeconds*1000), "paused/dump_all")
	}
	b.ReportMetric(float64(size)/1e6, "file-MB")
	b.ReportMetric(float64(copied)/1e6, "copied-MB")
	if copied > 0 { // the copy lives outside Go's heap
		b.ReportMetric(float64(peak+uint64(held))/float64(copied), "memory/copied")
	}
}
