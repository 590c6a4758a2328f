package heapdump_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/heap/heaptest"
	"github.com/rbscope/rbscope/internal/malloc"
	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// reachReport is what testdata/heap_reach.rb writes about itself.
type reachReport struct {
	PID     int               `json:"pid"`
	Version string            `json:"version"`
	Markers map[string]string `json:"markers"`
	Weak    map[string]string `json:"weak"`
}

// allocatorOf names the allocator a test Ruby runs with.
func allocatorOf(rb testruby.Ruby) malloc.Kind {
	switch {
	case strings.Contains(rb.Name, "jemalloc"):
		return malloc.Jemalloc
	case strings.Contains(rb.Name, "musl"):
		return malloc.Mallocng
	}
	return malloc.Glibc
}

// TestHeapDumpReachesWhatDumpAllReaches dumps a program that holds
// markers only through closures, method and enumerator receivers, queues,
// generic instance variables, fiber-locals, thread variables, a sleeping
// thread's locals, class variables, method literals and an anonymous
// class's constants, and checks, object by object against Ruby's own
// dump_all, that rbscope's roots reach what Ruby's do, and that `heap
// path` names the holder chains.
func TestHeapDumpReachesWhatDumpAllReaches(t *testing.T) {
	for _, rb := range testruby.WithJemalloc(t, testruby.Rubies(t)) {
		t.Run(rb.Name, func(t *testing.T) {
			t.Parallel()
			rubyDump := filepath.Join(t.TempDir(), "ruby-dump.json")
			p := testruby.Start(t, rb, "heap_reach.rb", nil, rubyDump)
			var rep reachReport
			p.WaitReport(t, &rep, 60*time.Second)
			vm, _ := testvm.AttachAsleep(t, p.PID(), true)
			var out bytes.Buffer
			st, _, err := heapdump.WriteSnapshot(vm, vm.T.(*target.Live), &out, heapdump.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// The allocator is the one the process runs with, and its
			// metadata sized the blocks no layout sizes.
			if st.AllocatorWhy != "" || st.Allocator != allocatorOf(rb) {
				t.Errorf("allocator %s (%s), want %s", st.Allocator, st.AllocatorWhy, allocatorOf(rb))
			}
			if st.PartialTotal > 0 {
				t.Errorf("%d objects written partially: %v", st.PartialTotal, st.Partial)
			}
			mine, err := heap.Load(bytes.NewReader(out.Bytes()), "rbscope dump")
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(rubyDump)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			theirs, err := heap.Load(f, rubyDump)
			if err != nil {
				t.Fatal(err)
			}
			// What dump_all's machine_context root held is what was on the
			// C stack while dump_all itself ran, gone since: compare what
			// its other roots reach, among the objects both dumps have
			// (Ruby's dump allocated while it ran).
			reach := heaptest.Compare(mine, theirs)
			myReach, theirReach, share := reach.Mine, reach.Theirs, reach.Share()
			t.Logf("Ruby %s: %v", rep.Version, reach)
			// rbscope reaches 100% on every build, but for what only
			// dump_all's own frames held while it ran (the method entries
			// on the dumping fiber's VM stack, 18 objects on 3.4 now and
			// then): #23's target of 99% leaves room for that.
			if share < heaptest.Share {
				t.Errorf("reached %.2f%% of what dump_all reaches, want >= %.0f%%", 100*share, 100*heaptest.Share)
			}
			for name, a := range rep.Markers {
				addr := parseAddr(t, a)
				if !theirReach[addr] {
					// Ruby 3.4's dump_all leaves the finalizer table out of
					// its roots, though its GC marks it.
					t.Logf("marker %s %s: dump_all's roots do not reach it", name, a)
				}
				i, ok := mine.Lookup(addr)
				if !ok {
					t.Errorf("marker %s %s: not in rbscope's dump", name, a)
					continue
				}
				if !myReach[addr] {
					t.Errorf("marker %s %s (%s): not reachable from rbscope's roots", name, a, mine.Describe(i))
				}
			}
			for _, k := range []string{"proc", "literal"} {
				if _, ok := rep.Markers[k]; !ok {
					t.Errorf("the program did not report marker %s", k)
				}
			}
			// The WeakMap's key and value, and the superclass's subclass,
			// are weak references, not references.
			for _, c := range []struct{ holder, held string }{{"map", "key"}, {"map", "value"}, {"base", "sub"}} {
				var line struct {
					References []string `json:"references"`
					Weak       []string `json:"weak_references"`
				}
				for _, l := range bytes.Split(out.Bytes(), []byte("\n")) {
					if bytes.HasPrefix(l, []byte(`{"address":"`+rep.Weak[c.holder]+`"`)) {
						if err := json.Unmarshal(l, &line); err != nil {
							t.Fatal(err)
						}
					}
				}
				if a := rep.Weak[c.held]; !slices.Contains(line.Weak, a) || slices.Contains(line.References, a) {
					t.Errorf("%s %s: its %s %s is not among its weak references %v alone (references %v)", c.holder, rep.Weak[c.holder], c.held, a, line.Weak, line.References)
				}
			}
			// heap path names the holder chains.
			for _, c := range []struct{ marker, chain string }{
				{"proc", "DATA proc -> IMEMO env -> STRING"},
				{"fiber_local", "DATA VM/thread -> STRING"},
				{"thread_var", "DATA VM/thread -> HASH size 1 -> STRING"},
				{"cvar", "CLASS CvarHolder -> STRING"},
				{"generic_ivar", `STRING "marker carrier" -> STRING`},
				{"literal", "IMEMO iseq -> STRING"},
			} {
				i, ok := mine.Lookup(parseAddr(t, rep.Markers[c.marker]))
				if !ok {
					continue // said above
				}
				var chains []string
				found := false
				for _, p := range heap.Paths(mine, i, 3) {
					var hops []string
					for _, h := range p.Hops {
						hops = append(hops, strings.TrimSpace(h.Type+" "+h.Desc))
					}
					chain := strings.Join(hops, " -> ")
					chains = append(chains, p.Root+": "+chain)
					found = found || strings.Contains(chain, c.chain)
				}
				if !found {
					t.Errorf("%s: no path through %s: %q", c.marker, c.chain, chains)
				}
			}
		})
	}
}
