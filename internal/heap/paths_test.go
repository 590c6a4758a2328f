package heap

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestPathsPreferExactReferences: a path goes through a conservative
// reference only when no exact one reaches the holder, and says so.
func TestPathsPreferExactReferences(t *testing.T) {
	// vm -> 0x10 (thread) -conservative-> 0x40 (target's holder) -> 0x50
	// vm -> 0x20 -> 0x30 -> 0x40: longer, but exact.
	// 0x60 holds 0x70 only conservatively, and 0x70 holds 0x50.
	dump := `{"type":"ROOT", "root":"vm", "references":["0x10", "0x20", "0x60"]}
{"address":"0x10", "type":"DATA", "references":["0x40"], "conservative_references":["0x40"], "memsize":40}
{"address":"0x20", "type":"ARRAY", "references":["0x30"], "memsize":40}
{"address":"0x30", "type":"HASH", "references":["0x40"], "memsize":40}
{"address":"0x40", "type":"OBJECT", "references":["0x50"], "memsize":40}
{"address":"0x50", "type":"STRING", "value":"target", "memsize":40}
{"address":"0x60", "type":"DATA", "references":["0x70"], "conservative_references":["0x70"], "memsize":40}
{"address":"0x70", "type":"OBJECT", "references":["0x50"], "memsize":40}
`
	g, err := Load(strings.NewReader(dump), "test")
	if err != nil {
		t.Fatal(err)
	}
	idx := func(a uint64) int {
		i, ok := g.Lookup(a)
		if !ok {
			t.Fatalf("%#x not loaded", a)
		}
		return i
	}
	if g.numConservative() != 2 || !g.Conservative(idx(0x10), idx(0x40)) || g.Conservative(idx(0x30), idx(0x40)) {
		t.Fatalf("conservative references: %d, 0x10->0x40 %v, 0x30->0x40 %v",
			g.numConservative(), g.Conservative(idx(0x10), idx(0x40)), g.Conservative(idx(0x30), idx(0x40)))
	}
	paths := Paths(g, idx(0x50), 5)
	var got []string
	for _, p := range paths {
		var hops []string
		for _, h := range p.Hops {
			s := strings.ToLower(h.Type)
			if h.Conservative {
				s = "~" + s
			}
			hops = append(hops, s)
		}
		got = append(got, p.Root+": "+strings.Join(hops, " "))
	}
	want := []string{"vm: data ~object string", "vm: array hash object string"}
	// One path per holder: 0x70 is reached only conservatively (from 0x60);
	// 0x40 through the exact chain, though the conservative one is shorter.
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("paths = %q, want %q", got, want)
	}
}

// TestPathsIgnoring: ignoring a holder gives the paths that avoid it, and
// ignoring an object on the way reroutes through another.
func TestPathsIgnoring(t *testing.T) {
	// vm -> 0x10 -> 0x30 (target); vm -> 0x20 -> 0x21 -> 0x30;
	// global_tbl -> 0x40 -> 0x10.
	dump := `{"type":"ROOT", "root":"vm", "references":["0x10", "0x20"]}
{"type":"ROOT", "root":"global_tbl", "references":["0x40"]}
{"address":"0x10", "type":"ARRAY", "references":["0x30"], "memsize":40}
{"address":"0x20", "type":"HASH", "references":["0x21"], "memsize":40}
{"address":"0x21", "type":"ARRAY", "references":["0x30"], "memsize":40}
{"address":"0x30", "type":"STRING", "value":"target", "memsize":40}
{"address":"0x40", "type":"OBJECT", "references":["0x10"], "memsize":40}
`
	g, err := Load(strings.NewReader(dump), "test")
	if err != nil {
		t.Fatal(err)
	}
	idx := func(a uint64) int { i, _ := g.Lookup(a); return i }
	show := func(ps []Path) string {
		var out []string
		for _, p := range ps {
			s := p.Root
			for _, h := range p.Hops {
				s += fmt.Sprintf(" %#x", h.Address)
			}
			out = append(out, s)
		}
		return strings.Join(out, "; ")
	}
	for _, tc := range []struct {
		ignore []uint64
		want   string
	}{
		{nil, "vm 0x10 0x30; vm 0x20 0x21 0x30"},
		{[]uint64{0x10}, "vm 0x20 0x21 0x30"},
		{[]uint64{0x21}, "vm 0x10 0x30"},
		{[]uint64{0x10, 0x21}, ""},
		{[]uint64{0x20}, "vm 0x10 0x30"},
	} {
		var ig []int
		for _, a := range tc.ignore {
			ig = append(ig, idx(a))
		}
		if got := show(PathsIgnoring(g, idx(0x30), 5, ig)); got != tc.want {
			t.Errorf("ignoring %#x: %q, want %q", tc.ignore, got, tc.want)
		}
	}
}

// TestPathSearchMatchesPaths: the kept searches give, object after
// object, the very paths a search of its own gives, with and without
// objects ignored, on random graphs.
func TestPathSearchMatchesPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 6; round++ {
		g, err := Load(strings.NewReader(randomDump(rng, 400, 1200, 6)), "random.json")
		if err != nil {
			t.Fatal(err)
		}
		ps := NewPathSearch(g)
		for k := 0; k < 150; k++ {
			target := rng.IntN(g.Len())
			var ignore []int
			for range rng.IntN(3) {
				ignore = append(ignore, rng.IntN(g.Len()))
			}
			want := PathsIgnoring(g, target, 4, ignore)
			if got := ps.Paths(target, 4, g.Holders(target), ignore); !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, target %d, ignoring %v:\nkept search %+v\nown search  %+v", round, target, ignore, got, want)
			}
		}
	}
}
