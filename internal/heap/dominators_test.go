package heap

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomDump writes a dump of n objects with random references and roots.
func randomDump(rng *rand.Rand, n, edges, roots int) string {
	var b strings.Builder
	refs := make([][]int, n)
	for range edges {
		v := rng.IntN(n)
		refs[v] = append(refs[v], rng.IntN(n))
	}
	b.WriteString(`{"type":"ROOT", "root":"vm", "references":[`)
	for k := range roots {
		if k > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"%#x"`, 0x1000+8*rng.IntN(n))
	}
	b.WriteString("]}\n")
	for v := range n {
		fmt.Fprintf(&b, `{"address":"%#x", "type":"OBJECT", "memsize":%d, "references":[`, 0x1000+8*v, 1+rng.IntN(100))
		for k, w := range refs[v] {
			if k > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, `"%#x"`, 0x1000+8*w)
		}
		b.WriteString("]}\n")
	}
	return b.String()
}

// naiveDominators computes dominator sets by the textbook data-flow
// iteration: dom(v) = {v} + the intersection of dom(p) over predecessors.
// Node n is the super-root.
func naiveDominators(g *Graph) (reach []bool, dom [][]bool) {
	n := g.Len()
	succ := func(v int) []int {
		var out []int
		if v == n {
			for _, r := range g.Roots {
				for _, w := range r.Refs {
					out = append(out, int(w))
				}
			}
			return out
		}
		for _, w := range g.Refs(v) {
			out = append(out, int(w))
		}
		return out
	}
	reach = make([]bool, n+1)
	reach[n] = true
	stack := []int{n}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, w := range succ(v) {
			if !reach[w] {
				reach[w] = true
				stack = append(stack, w)
			}
		}
	}
	preds := make([][]int, n+1)
	for v := 0; v <= n; v++ {
		if reach[v] {
			for _, w := range succ(v) {
				preds[w] = append(preds[w], v)
			}
		}
	}
	dom = make([][]bool, n+1)
	for v := range dom {
		dom[v] = make([]bool, n+1)
		for u := range dom[v] {
			dom[v][u] = v != n || u == n
		}
	}
	for changed := true; changed; {
		changed = false
		for v := 0; v < n; v++ {
			if !reach[v] {
				continue
			}
			for u := 0; u <= n; u++ {
				in := u == v
				if !in {
					in = true
					for _, p := range preds[v] {
						in = in && dom[p][u]
					}
				}
				if in != dom[v][u] {
					dom[v][u] = in
					changed = true
				}
			}
		}
	}
	return reach, dom
}

func TestDominatorsAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		n := 1 + rng.IntN(40)
		src := randomDump(rng, n, rng.IntN(3*n+1), 1+rng.IntN(3))
		g, err := Load(strings.NewReader(src), "random.json")
		if err != nil {
			t.Fatal(err)
		}
		d := Dominators(g)
		reach, dom := naiveDominators(g)
		reachable := 0
		for v := 0; v < n; v++ {
			idom, ok := d.Idom(v)
			if ok != reach[v] {
				t.Fatalf("iter %d: object %d reachable %v, naive says %v\n%s", iter, v, ok, reach[v], src)
			}
			if !ok {
				if d.Retained[v] != 0 {
					t.Fatalf("iter %d: unreachable %d retains %d", iter, v, d.Retained[v])
				}
				continue
			}
			reachable++
			// The immediate dominator is the strict dominator that all
			// the other strict dominators dominate.
			want := -1
			for u := 0; u < n; u++ {
				if u == v || !dom[v][u] {
					continue
				}
				closest := true
				for x := 0; x < n; x++ {
					if x != v && x != u && dom[v][x] && !dom[u][x] {
						closest = false
					}
				}
				if closest {
					want = u
				}
			}
			if idom != want {
				t.Fatalf("iter %d: idom(%d) = %d, naive says %d\n%s", iter, v, idom, want, src)
			}
			var retained, count uint64
			for w := 0; w < n; w++ {
				if reach[w] && dom[w][v] {
					retained += g.Memsize(w)
					count++
				}
			}
			if d.Retained[v] != retained || uint64(d.RetainedCount[v]) != count {
				t.Fatalf("iter %d: retained(%d) = %d/%d, naive says %d/%d\n%s", iter, v, d.Retained[v], d.RetainedCount[v], retained, count, src)
			}
		}
		if d.Reachable != reachable {
			t.Fatalf("iter %d: %d reachable, naive says %d", iter, d.Reachable, reachable)
		}
		top := d.Top(5)
		for k := 1; k < len(top); k++ {
			if top[k].Retained > top[k-1].Retained {
				t.Fatalf("top not sorted: %+v", top)
			}
		}
	}
}

// TestDominatorsDeep checks a chain a million objects long (no recursion
// to overflow) closed into a cycle.
func TestDominatorsDeep(t *testing.T) {
	const n = 1_000_000
	var b strings.Builder
	b.WriteString(`{"type":"ROOT", "root":"global_tbl", "references":["0x1000"]}` + "\n")
	for i := range n {
		fmt.Fprintf(&b, `{"address":"%#x", "type":"ARRAY", "memsize":40, "references":["%#x"]}`+"\n", 0x1000+8*i, 0x1000+8*((i+1)%n))
	}
	g, err := Load(strings.NewReader(b.String()), "chain.json")
	if err != nil {
		t.Fatal(err)
	}
	d := Dominators(g)
	if d.Reachable != n || d.Retained[0] != 40*n || d.RetainedCount[n-1] != 1 {
		t.Fatalf("reachable %d, retained %d, last count %d", d.Reachable, d.Retained[0], d.RetainedCount[n-1])
	}
	if idom, _ := d.Idom(n - 1); idom != n-2 {
		t.Fatalf("idom of the last = %d", idom)
	}
	paths := Paths(g, n-1, 3)
	if len(paths) != 1 || len(paths[0].Hops) != n || paths[0].Root != "global_tbl" {
		t.Fatalf("%d paths", len(paths))
	}
}

func TestPaths(t *testing.T) {
	// vm -> A -> B -> T, global_tbl -> C -> T, T -> B (a cycle through the
	// target), D -> T with D unreachable.
	src := `{"type":"ROOT", "root":"vm", "references":["0x10"]}
{"type":"ROOT", "root":"global_tbl", "references":["0x30"]}
{"address":"0x10", "type":"ARRAY", "length":1, "references":["0x20"]}
{"address":"0x20", "type":"HASH", "size":1, "references":["0x40"]}
{"address":"0x30", "type":"ARRAY", "length":1, "references":["0x40"]}
{"address":"0x40", "type":"STRING", "value":"target", "references":["0x20"]}
{"address":"0x50", "type":"ARRAY", "length":1, "references":["0x40"]}
`
	g, err := Load(strings.NewReader(src), "p.json")
	if err != nil {
		t.Fatal(err)
	}
	target, _ := g.Lookup(0x40)
	show := func(ps []Path) string {
		var out []string
		for _, p := range ps {
			s := p.Root
			for _, h := range p.Hops {
				s += fmt.Sprintf(" -> %#x %s", h.Address, h.Desc)
			}
			out = append(out, s)
		}
		return strings.Join(out, "\n")
	}
	got := show(Paths(g, target, 5))
	want := "global_tbl -> 0x30 length 1 -> 0x40 \"target\"\nvm -> 0x10 length 1 -> 0x20 size 1 -> 0x40 \"target\""
	if got != want {
		t.Errorf("paths:\n%s\nwant\n%s", got, want)
	}
	if got := show(Paths(g, target, 1)); got != "global_tbl -> 0x30 length 1 -> 0x40 \"target\"" {
		t.Errorf("one path: %s", got)
	}
	if h := g.Holders(target); len(h) != 3 {
		t.Errorf("holders %v", h)
	}
	d, _ := g.Lookup(0x50)
	if ps := Paths(g, d, 5); len(ps) != 0 {
		t.Errorf("unreachable object has paths %s", show(ps))
	}
}
