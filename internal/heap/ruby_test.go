package heap

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// graphReport is what testdata/heap_graph.rb reports.
type graphReport struct {
	Version        string   `json:"version"`
	Holder         string   `json:"holder"`
	Hash           string   `json:"hash"`
	Strings        []string `json:"strings"`
	StringsMemsize uint64   `json:"strings_memsize"`
	Cycle          []string `json:"cycle"`
	Path           struct {
		Module, Array, Hash, Target, Value string
	} `json:"path"`
}

// RunHeapGraph runs testdata/heap_graph.rb on rb and loads its dump.
func runHeapGraph(t *testing.T, rb testruby.Ruby) (*Graph, *graphReport) {
	t.Helper()
	dump := filepath.Join(t.TempDir(), "heap.json")
	p := testruby.Start(t, rb, "heap_graph.rb", nil, dump)
	var rep graphReport
	p.WaitReport(t, &rep, 60*time.Second)
	g, err := LoadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	return g, &rep
}

func lookup(t *testing.T, g *Graph, addr string) int {
	t.Helper()
	a, err := strconv.ParseUint(addr, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	i, ok := g.Lookup(a)
	if !ok {
		t.Fatalf("%s not in the dump", addr)
	}
	return i
}

func TestRubyGraphs(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			g, rep := runHeapGraph(t, rb)
			t.Logf("Ruby %s: %d objects, %d references (%d dangling), %d roots", rep.Version, g.Len(), g.NumRefs(), g.Dangling, len(g.Roots))
			d := Dominators(g)

			// The dominator: $holder -> Hash -> 1,000 Strings.
			holder, hash := lookup(t, g, rep.Holder), lookup(t, g, rep.Hash)
			if g.Type(hash) != "HASH" || g.ClassName(hash) != "Hash" || g.Describe(hash) != "size 1000" {
				t.Errorf("hash: %s %s %s", g.Type(hash), g.ClassName(hash), g.Describe(hash))
			}
			if idom, ok := d.Idom(hash); !ok || idom != holder {
				t.Errorf("idom(hash) = %d %v, want the holder %d", idom, ok, holder)
			}
			var sum uint64
			notDominated := 0
			for _, s := range rep.Strings {
				i := lookup(t, g, s)
				sum += g.Memsize(i)
				if idom, ok := d.Idom(i); !ok || idom != hash {
					notDominated++
					if notDominated < 5 {
						t.Errorf("string %s %s: idom %d %v, want the hash; paths: %+v", s, g.Describe(i), idom, ok, Paths(g, i, 3))
					}
				}
			}
			if notDominated > 0 {
				t.Errorf("%d of %d strings not dominated by the hash", notDominated, len(rep.Strings))
			}
			if sum != rep.StringsMemsize {
				t.Errorf("strings' memsize in the dump %d, ObjectSpace.memsize_of says %d", sum, rep.StringsMemsize)
			}
			if d.Retained[hash] < rep.StringsMemsize+g.Memsize(hash) || d.RetainedCount[hash] < 1001 {
				t.Errorf("hash retains %d bytes in %d objects, want >= %d in >= 1001", d.Retained[hash], d.RetainedCount[hash], rep.StringsMemsize+g.Memsize(hash))
			}
			if d.Retained[holder] < d.Retained[hash]+g.Memsize(holder) {
				t.Errorf("holder retains %d, hash %d", d.Retained[holder], d.Retained[hash])
			}
			found := false
			for _, r := range d.Top(g.Len()) {
				if r.Index == hash {
					found = r.Retained == d.Retained[hash] && r.Idom == holder && r.Class == "Hash"
				}
			}
			if !found {
				t.Errorf("hash not among the retainers")
			}

			// The cycle: $cycle = a -> b -> c -> a.
			a, b, c := lookup(t, g, rep.Cycle[0]), lookup(t, g, rep.Cycle[1]), lookup(t, g, rep.Cycle[2])
			for _, x := range []int{a, b, c} {
				if g.ClassName(x) != "CycleNode" || g.Type(x) != "OBJECT" {
					t.Errorf("cycle node %#x: %s %s", g.Address(x), g.Type(x), g.ClassName(x))
				}
			}
			if ib, _ := d.Idom(b); ib != a {
				t.Errorf("idom(b) = %d, want a = %d", ib, a)
			}
			if ic, _ := d.Idom(c); ic != b {
				t.Errorf("idom(c) = %d, want b = %d", ic, b)
			}
			if ia, ok := d.Idom(a); !ok || ia == b || ia == c {
				t.Errorf("idom(a) = %d %v", ia, ok)
			}
			if want := g.Memsize(a) + g.Memsize(b) + g.Memsize(c); d.Retained[a] < want || d.RetainedCount[a] < 3 {
				t.Errorf("a retains %d in %d objects, want >= %d in 3", d.Retained[a], d.RetainedCount[a], want)
			}
			ps := Paths(g, c, 1)
			if len(ps) != 1 || len(ps[0].Hops) != 3 || ps[0].Root != "global_tbl" ||
				ps[0].Hops[0].Index != a || ps[0].Hops[1].Index != b || ps[0].Hops[2].Index != c {
				t.Errorf("path to c: %+v", ps)
			}

			// The path: PathHolder::CONST -> Array -> Hash -> target String.
			target := lookup(t, g, rep.Path.Target)
			want := []int{lookup(t, g, rep.Path.Module), lookup(t, g, rep.Path.Array), lookup(t, g, rep.Path.Hash), target}
			ps = Paths(g, target, 5)
			if len(ps) == 0 {
				t.Fatalf("no path to the target")
			}
			hops := ps[0].Hops
			if len(hops) < 4 {
				t.Fatalf("path %+v", ps[0])
			}
			for k, w := range want {
				if h := hops[len(hops)-4+k]; h.Index != w {
					t.Errorf("hop %d of %+v: %#x, want %#x", len(hops)-4+k, ps[0], h.Address, g.Address(w))
				}
			}
			if m := hops[len(hops)-4]; m.Type != "MODULE" || m.Desc != "PathHolder" {
				t.Errorf("module hop %+v", m)
			}
			if s := hops[len(hops)-1]; s.Desc != strconv.Quote(rep.Path.Value) && s.Desc != "shares "+strconv.Quote(rep.Path.Value) {
				t.Errorf("target hop %+v, want value %q", s, rep.Path.Value)
			}
			for _, p := range ps {
				t.Logf("path from %s: %d hops", p.Root, len(p.Hops))
			}
		})
	}
}

// diffReport is what testdata/heap_graph_diff.rb reports.
type diffReport struct {
	Version string `json:"version"`
	Before  string `json:"before"`
	After   string `json:"after"`
	Leaky   uint64 `json:"leaky"`
	Site    string `json:"site"`
}

func TestRubyDiff(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			dir := t.TempDir()
			p := testruby.Start(t, rb, "heap_graph_diff.rb", nil, filepath.Join(dir, "before.json"), filepath.Join(dir, "after.json"))
			var rep diffReport
			p.WaitReport(t, &rep, 60*time.Second)
			a, err := LoadFile(rep.Before)
			if err != nil {
				t.Fatal(err)
			}
			b, err := LoadFile(rep.After)
			if err != nil {
				t.Fatal(err)
			}
			d := Diff(a, b)
			t.Logf("Ruby %s: %d -> %d objects; new %d (%d bytes), gone %d", rep.Version, a.Len(), b.Len(), d.NewObjects, d.NewBytes, d.GoneObjects)
			// Exactly: no Leaky existed before, so none can share an
			// address with an object of the same class in the first dump.
			var leaky *DiffRow
			for k, r := range d.ByClass {
				if r.Class == "Leaky" && r.Type == "OBJECT" {
					leaky = &d.ByClass[k]
				}
				if k > 0 && r.Bytes > d.ByClass[k-1].Bytes {
					t.Errorf("rows not largest first")
				}
			}
			if leaky == nil || leaky.Count != rep.Leaky || leaky.Type != "OBJECT" || leaky.Bytes < 40*rep.Leaky {
				t.Fatalf("Leaky row %+v, want OBJECT x %d; rows %+v", leaky, rep.Leaky, d.ByClass)
			}
			if d.ByClass[0].Class != "Leaky" {
				t.Errorf("largest row %+v, want Leaky", d.ByClass[0])
			}
			found := false
			for _, r := range d.BySite {
				if r.Class == "Leaky" && r.Type == "OBJECT" {
					found = true
					if r.Site != rep.Site || r.Count != rep.Leaky {
						t.Errorf("Leaky site row %+v, want %s x %d", r, rep.Site, rep.Leaky)
					}
				}
			}
			if !found {
				t.Errorf("no Leaky row by site")
			}
			// The other way round nothing of class Leaky is new.
			for _, r := range Diff(b, a).ByClass {
				if r.Class == "Leaky" {
					t.Errorf("reverse diff has %+v", r)
				}
			}
		})
	}
}
