package rubyvm_test

import (
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// heapReport is what testdata/heap_census.rb writes about itself.
type heapReport struct {
	PID          int               `json:"pid"`
	Version      string            `json:"version"`
	CountObjects map[string]uint64 `json:"count_objects"`
	HeapProbe    uint64            `json:"heap_probe"`
}

// exactTypes are the types whose census must equal ObjectSpace.count_objects
// exactly: the program is quiescent (GC disabled, main thread asleep, no
// other thread) and a full GC brought its heap back to what it counted.
var exactTypes = []string{"OBJECT", "STRING", "ARRAY", "HASH", "CLASS", "MODULE", "ICLASS", "REGEXP", "FLOAT", "BIGNUM", "DATA", "SYMBOL"}

// imemoSlack bounds how many more T_IMEMO rbscope may count: writing the
// report after counting creates call caches and call info for the call
// sites it runs for the first time (JSON.generate's, File.rename's), which
// stay alive as IMEMOs the program never counted (5 on 3.1 and 3.3).
const imemoSlack = 64

// TestHeapCensusMatchesCountObjects takes a census of a known heap from
// outside and compares it with what the program counted itself, for every
// Ruby installed.
func TestHeapCensusMatchesCountObjects(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "heap_census.rb", nil)
			var rep heapReport
			p.WaitReport(t, &rep, 60*time.Second)
			// readThreads returns once the main thread sleeps: the
			// program's heap is then what it counted.
			vm, _ := testvm.AttachAsleep(t, p.PID(), true)
			var c *rubyvm.Census
			err := testvm.Paused(t, vm, func() (err error) {
				c, err = vm.HeapCensus()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			checkCensus(t, vm, c, &rep)
		})
	}
}

// checkCensus compares a census of heap_census.rb's heap with what the
// program counted itself (rep).
func checkCensus(t *testing.T, vm *rubyvm.VM, c *rubyvm.Census, rep *heapReport) {
	t.Helper()
	t.Logf("Ruby %s: %d objects, %d bytes, %d pages, %d slots, %d free, %d zombies, %d moved, %d skipped pages",
		vm.Version, c.Objects, c.Bytes, c.Pages, c.Slots, c.Free, c.Zombies, c.Moved, c.SkippedPages)
	if c.SkippedPages != 0 {
		t.Errorf("%d pages could not be read from a paused process or a core", c.SkippedPages)
	}
	if c.Slots != rep.CountObjects["TOTAL"] {
		t.Errorf("heap slots: rbscope %d, count_objects TOTAL %d", c.Slots, rep.CountObjects["TOTAL"])
	}
	byType := map[string]rubyvm.CensusRow{}
	for _, r := range c.ByType {
		byType[r.Type] = r
	}
	for _, typ := range exactTypes {
		if got, want := byType[typ].Count, rep.CountObjects["T_"+typ]; got != want {
			t.Errorf("T_%s: rbscope counts %d, count_objects %d", typ, got, want)
		}
	}
	if got, want := byType["IMEMO"].Count, rep.CountObjects["T_IMEMO"]; got < want || got > want+imemoSlack {
		t.Errorf("T_IMEMO: rbscope counts %d, count_objects %d (allowed: up to %d more)", got, want, imemoSlack)
	}
	for typ, r := range byType {
		if want := rep.CountObjects["T_"+typ]; r.Count != want {
			t.Logf("T_%s: rbscope %d, count_objects %d", typ, r.Count, want)
		}
		if r.Bytes < r.Count*uint64(vm.Layout.BaseSlotSize) {
			t.Errorf("T_%s: %d bytes for %d objects, less than a slot each", typ, r.Bytes, r.Count)
		}
	}
	var probe rubyvm.CensusRow
	for _, r := range c.ByClass {
		if r.Class == "HeapProbe" {
			if probe.Class != "" {
				t.Errorf("two HeapProbe rows: %+v and %+v", probe, r)
			}
			probe = r
		}
	}
	if probe.Count != rep.HeapProbe || probe.Type != "OBJECT" || rep.HeapProbe != 50_000 {
		t.Errorf("HeapProbe row %+v, ObjectSpace.each_object(HeapProbe).count = %d (50000 made)", probe, rep.HeapProbe)
	}
	// 1000 Strings of 100..1099 bytes and 2000 Arrays of 10
	// elements live in malloc'd buffers the bytes must include.
	if s := byType["STRING"]; s.Bytes < s.Count*uint64(vm.Layout.BaseSlotSize)+(100+1099)*1000/2 {
		t.Errorf("STRING bytes %d leave out the long strings' buffers", s.Bytes)
	}
	if a := byType["ARRAY"]; a.Bytes < a.Count*uint64(vm.Layout.BaseSlotSize)+2000*10*8 {
		t.Errorf("ARRAY bytes %d leave out the arrays' buffers", a.Bytes)
	}
	var sumCount, sumBytes uint64
	for _, r := range c.ByClass {
		sumCount += r.Count
		sumBytes += r.Bytes
	}
	if sumCount != c.Objects || sumBytes != c.Bytes {
		t.Errorf("class rows sum to %d objects, %d bytes; census says %d, %d", sumCount, sumBytes, c.Objects, c.Bytes)
	}
}
