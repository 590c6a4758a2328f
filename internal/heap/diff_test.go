package heap

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// randomPair writes two dumps of objects drawn from one pool of
// addresses over several lookup blocks, in shuffled order: an address in
// either, both, or neither, an object of one of two classes at it (a slot
// taken again by another class between the dumps).
func randomPair(rng *rand.Rand, n int) (string, string) {
	var a, b []string
	for k := range n {
		addr := uint64(0x10000*(1+rng.IntN(4)) + 8*k)
		line := func() string {
			return fmt.Sprintf(`{"address":"%#x", "type":"OBJECT", "class":"%#x", "memsize":%d}`, addr, 0x100+8*rng.IntN(2), 1+rng.IntN(100))
		}
		switch rng.IntN(4) {
		case 0:
			a = append(a, line())
		case 1:
			b = append(b, line())
		case 2:
			a, b = append(a, line()), append(b, line())
		}
	}
	rng.Shuffle(len(a), func(i, j int) { a[i], a[j] = a[j], a[i] })
	rng.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
	return strings.Join(a, "\n") + "\n", strings.Join(b, "\n") + "\n"
}

// TestDiffAgainstLookup: Diff, walking both dumps in address order,
// finds the new and the gone objects that looking each address up in the
// other dump finds; DiffSuspects finds what Diff and Suspects do.
func TestDiffAgainstLookup(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 200 {
		sa, sb := randomPair(rng, rng.IntN(60))
		a, err := Load(strings.NewReader(sa), "a.json")
		if err != nil {
			t.Fatal(err)
		}
		b, err := Load(strings.NewReader(sb), "b.json")
		if err != nil {
			t.Fatal(err)
		}
		want := &DiffResult{}
		for j := 0; j < b.Len(); j++ {
			if i, ok := a.Lookup(b.Address(j)); !ok || !same(a, i, b, j) {
				want.NewObjects++
				want.NewBytes += b.Memsize(j)
			}
		}
		for i := 0; i < a.Len(); i++ {
			if j, ok := b.Lookup(a.Address(i)); !ok || !same(a, i, b, j) {
				want.GoneObjects++
				want.GoneBytes += a.Memsize(i)
			}
		}
		got := Diff(a, b)
		if got.NewObjects != want.NewObjects || got.NewBytes != want.NewBytes || got.GoneObjects != want.GoneObjects || got.GoneBytes != want.GoneBytes {
			t.Fatalf("dumps %d: new %d (%d B), gone %d (%d B); by lookup: new %d (%d B), gone %d (%d B)\n%s\n%s", iter,
				got.NewObjects, got.NewBytes, got.GoneObjects, got.GoneBytes, want.NewObjects, want.NewBytes, want.GoneObjects, want.GoneBytes, sa, sb)
		}
		// Both from one comparison: what each alone finds.
		d := Dominators(b)
		both, sus := DiffSuspects(a, b, d, 10)
		if !reflect.DeepEqual(both, got) || !reflect.DeepEqual(sus, Suspects(a, b, d, 10)) {
			t.Fatalf("dumps %d: DiffSuspects %+v %+v; Diff %+v, Suspects %+v", iter, both, sus, got, Suspects(a, b, d, 10))
		}
	}
}
