package heap

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/rawfile"
	"github.com/rbscope/rbscope/internal/testruby"
)

// sameAnswers fails unless a and b (with their trees) answer every
// question the same way: objects, descriptions, references, top
// retainers and paths.
func sameAnswers(t *testing.T, a *Graph, da *DomTree, b *Graph, db *DomTree) {
	t.Helper()
	if a.Len() != b.Len() || a.Bytes != b.Bytes || a.NumRefs() != b.NumRefs() || a.numConservative() != b.numConservative() ||
		!reflect.DeepEqual(a.Roots, b.Roots) || a.HasSites() != b.HasSites() {
		t.Fatalf("graphs differ: %d/%d objects, %d/%d bytes", a.Len(), b.Len(), a.Bytes, b.Bytes)
	}
	for i := 0; i < a.Len(); i++ {
		if a.Hop(i) != b.Hop(i) || a.Memsize(i) != b.Memsize(i) || !slices.Equal(a.Refs(i), b.Refs(i)) {
			t.Fatalf("object %d: %+v vs %+v", i, a.Hop(i), b.Hop(i))
		}
		if j, ok := b.Lookup(a.Address(i)); !ok || j != i {
			t.Fatalf("lookup %#x: %d %v", a.Address(i), j, ok)
		}
		sa, oka := a.Site(i)
		sb, okb := b.Site(i)
		if sa != sb || oka != okb {
			t.Fatalf("object %d: site %v vs %v", i, sa, sb)
		}
		ia, oka := da.Idom(i)
		ib, okb := db.Idom(i)
		if ia != ib || oka != okb {
			t.Fatalf("object %d: idom %d vs %d", i, ia, ib)
		}
	}
	if !reflect.DeepEqual(da.Top(50), db.Top(50)) || da.Reachable != db.Reachable || da.ReachableBytes != db.ReachableBytes {
		t.Fatalf("top retainers differ")
	}
	for _, r := range da.Top(5) {
		if !reflect.DeepEqual(Paths(a, r.Index, 3), Paths(b, r.Index, 3)) {
			t.Fatalf("paths to %d differ", r.Index)
		}
	}
}

func roundTrip(t *testing.T, g *Graph, d *DomTree) (*Graph, *DomTree, []byte) {
	t.Helper()
	var buf bytes.Buffer
	rev, kids := NewReverse(g), d.Children()
	if err := WriteIndex(rawfile.NewWriter(&buf), g, d, rev, kids); err != nil {
		t.Fatal(err)
	}
	raw := bytes.Clone(buf.Bytes())
	g2, d2, rev2, kids2, err := readIndexBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	for i := -1; i < g.Len(); i++ {
		if i >= 0 && !slices.Equal(rev.Of(i), rev2.Of(i)) {
			t.Fatalf("referrers of %d: %v, read back %v", i, rev.Of(i), rev2.Of(i))
		}
		if !slices.Equal(kids.Of(i), kids2.Of(i)) {
			t.Fatalf("dominator tree children of %d: %v, read back %v", i, kids.Of(i), kids2.Of(i))
		}
	}
	return g2, d2, raw
}

// readIndexBytes reads the index in b (a copy of it, in place).
func readIndexBytes(b []byte) (*Graph, *DomTree, *Reverse, *Children, error) {
	return ReadIndex(rawfile.NewReader(rawfile.Aligned(bytes.Clone(b))))
}

func TestIndexRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	dump := randomDump(rng, 3000, 9000, 20)
	g, err := Load(strings.NewReader(dump), "random.json")
	if err != nil {
		t.Fatal(err)
	}
	d := Dominators(g)
	g2, d2, raw := roundTrip(t, g, d)
	sameAnswers(t, g, d, g2, d2)

	// Every object's own line, from the offsets the index kept, in the
	// dump plain and compressed; a dump that changed since is an error.
	dir := t.TempDir()
	for _, name := range []string{"random.json", "random.json.zst", "random.json.gz"} {
		f := writeDump(t, filepath.Join(dir, name), dump)
		for _, gr := range []*Graph{g, g2} {
			for i := 0; i < gr.Len(); i += 1 + 50*int(f.Compression) {
				rec, err := gr.Record(f, i)
				if err != nil || rec.Address != gr.Address(i) {
					t.Fatalf("%s: object %d (%#x): line of %#x, %v", name, i, gr.Address(i), rec.Address, err)
				}
			}
		}
		f = writeDump(t, filepath.Join(dir, "changed-"+name), `{"address":"0x8", "type":"OBJECT", "memsize":1}`+"\n"+dump)
		if _, err := g2.Record(f, g2.Len()-1); err == nil {
			t.Errorf("%s: the line of an object of a dump that changed: no error", name)
		}
	}

	// A cut or damaged index is an error, never a panic.
	for _, cut := range []int{0, 10, len(raw) / 2, len(raw) - 1} {
		if _, _, _, _, err := readIndexBytes(raw[:cut]); err == nil {
			t.Errorf("index cut at %d of %d: no error", cut, len(raw))
		}
	}
	for k := range 200 {
		bad := bytes.Clone(raw)
		for range 1 + k%4 {
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("damaged index: panic %v", r)
				}
			}()
			g3, d3, rev3, kids3, err := readIndexBytes(bad)
			if err == nil { // a damaged value that stays in range: still usable
				d3.Top(5)
				kids3.Of(-1)
				for i := 0; i < g3.Len(); i++ {
					g3.Describe(i)
					g3.Lookup(g3.Address(i))
					rev3.Of(i)
					kids3.Of(i)
				}
			}
		}()
	}
}

func TestIndexVersion(t *testing.T) {
	g, err := Load(strings.NewReader(`{"type":"ROOT", "root":"vm", "references":["0x10"]}
{"address":"0x10", "type":"STRING", "value":"x", "memsize":40}
`), "tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := rawfile.NewWriter(&buf)
	w.Gob(&indexHead{Version: indexVersion + 1, Endian: endianMark})
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := readIndexBytes(buf.Bytes()); !errors.Is(err, ErrIndexVersion) {
		t.Errorf("another version: %v", err)
	}
	g2, d2, _ := roundTrip(t, g, Dominators(g))
	if g2.Describe(0) != `"x"` || d2.Reachable != 1 {
		t.Errorf("tiny: %q %d", g2.Describe(0), d2.Reachable)
	}
}

// TestIndexRuby round-trips the dump of a real program, conservative
// references and all.
func TestIndexRuby(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	g, rep := runHeapGraph(t, rb)
	d := Dominators(g)
	g2, d2, _ := roundTrip(t, g, d)
	sameAnswers(t, g, d, g2, d2)
	target := lookup(t, g2, rep.Path.Target)
	if !slices.Equal(NewReverse(g2).Of(target), toU32(g.Holders(target))) {
		t.Errorf("referrers of the target: %v, holders %v", NewReverse(g2).Of(target), g.Holders(target))
	}
	hash := lookup(t, g2, rep.Hash)
	kids := d2.Children().Of(hash)
	if len(kids) < 1000 {
		t.Errorf("the hash dominates %d objects immediately, want its 1000 Strings at least", len(kids))
	}
	for _, k := range kids {
		if up, _ := d2.Idom(int(k)); up != hash {
			t.Fatalf("child %d of the hash has idom %d", k, up)
		}
	}
}

func toU32(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}
