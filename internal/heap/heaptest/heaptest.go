// Package heaptest compares a heap dump rbscope wrote with the one the
// program wrote of itself (ObjectSpace.dump_all), for tests: which objects
// each one's roots reach, and what share of Ruby's rbscope's reach too.
package heaptest

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/heap"
)

// Share is the share of the objects Ruby's own dump reaches from its roots
// (and that are still in rbscope's dump) that rbscope's dump must reach
// from its roots.
const Share = 0.99

// Reachable returns the objects reachable from g's roots, by address,
// leaving out the roots named in skip.
func Reachable(g *heap.Graph, skip ...string) map[uint64]bool {
	seen := make([]bool, g.Len())
	var queue []uint32
	for _, r := range g.Roots {
		if slices.Contains(skip, r.Name) {
			continue
		}
		for _, i := range r.Refs {
			if !seen[i] {
				seen[i] = true
				queue = append(queue, i)
			}
		}
	}
	for len(queue) > 0 {
		i := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, j := range g.Refs(int(i)) {
			if !seen[j] {
				seen[j] = true
				queue = append(queue, j)
			}
		}
	}
	out := make(map[uint64]bool, g.Len())
	for i, ok := range seen {
		if ok {
			out[g.Address(i)] = true
		}
	}
	return out
}

// Reach is how much of what Ruby's dump reaches rbscope's dump reaches.
type Reach struct {
	// Want counts the objects Ruby's roots reach (its machine_context root
	// left out: what was on the C stack while dump_all itself ran, gone
	// since) that are also in rbscope's dump (Ruby's dump allocated while
	// it ran, and the program ran on between the two dumps); Got those of
	// them rbscope's roots reach.
	Want, Got int
	// Missed counts the objects rbscope's roots miss, by KindOf.
	Missed map[string]int
	// Frontier counts where the misses start: the edges of Ruby's dump
	// from an object rbscope reaches, or from a root, to an object of
	// rbscope's dump that rbscope does not reach ("HASH -> STRING",
	// "root vm -> CLASS").
	Frontier map[string]int
	// Mine and Theirs are the objects each dump's roots reach, by address.
	Mine, Theirs map[uint64]bool
}

// Share is Got over Want.
func (r Reach) Share() float64 { return float64(r.Got) / float64(max(r.Want, 1)) }

// String says the share and the kinds missed most.
func (r Reach) String() string {
	s := fmt.Sprintf("rbscope's roots reach %d of the %d objects dump_all's reach (%.2f%%); missed: %s",
		r.Got, r.Want, 100*r.Share(), TopKinds(r.Missed, 12))
	if len(r.Frontier) > 0 {
		s += "; edges dump_all follows and rbscope does not: " + TopKinds(r.Frontier, 15)
	}
	return s
}

// Compare compares rbscope's dump mine with Ruby's own theirs. Each of
// also is another dump of Ruby's own of the same process, taken after
// mine while the program ran on: then only the objects the roots of every
// one of Ruby's dumps reach count (the program's garbage of the moment,
// reachable in one of them only, does not).
func Compare(mine, theirs *heap.Graph, also ...*heap.Graph) Reach {
	r := Reach{Missed: map[string]int{}, Mine: Reachable(mine), Theirs: Reachable(theirs, "machine_context")}
	missedAt := map[uint64]bool{}
	var alsoReach []map[uint64]bool
	for _, g := range also {
		alsoReach = append(alsoReach, Reachable(g, "machine_context"))
	}
	for i := 0; i < theirs.Len(); i++ {
		a := theirs.Address(i)
		if !r.Theirs[a] || !reachedByAll(alsoReach, a) {
			continue
		}
		if _, ok := mine.Lookup(a); !ok {
			continue
		}
		r.Want++
		if r.Mine[a] {
			r.Got++
		} else {
			r.Missed[KindOf(theirs, i)]++
			missedAt[a] = true
		}
	}
	r.Frontier = map[string]int{}
	missed := func(j uint32) bool { return missedAt[theirs.Address(int(j))] }
	for i := 0; i < theirs.Len(); i++ {
		if !r.Mine[theirs.Address(i)] {
			continue
		}
		for _, j := range theirs.Refs(i) {
			if missed(j) {
				r.Frontier[KindOf(theirs, i)+" -> "+KindOf(theirs, int(j))]++
			}
		}
	}
	for _, root := range theirs.Roots {
		if root.Name == "machine_context" {
			continue // left out of Theirs, as above
		}
		for _, j := range root.Refs {
			if missed(j) {
				r.Frontier["root "+root.Name+" -> "+KindOf(theirs, int(j))]++
			}
		}
	}
	return r
}

func reachedByAll(reach []map[uint64]bool, a uint64) bool {
	for _, m := range reach {
		if !m[a] {
			return false
		}
	}
	return true
}

// KindOf names an object's type as the dumps do (IMEMO and DATA with their
// kind).
func KindOf(g *heap.Graph, i int) string {
	switch t := g.Type(i); t {
	case "IMEMO", "DATA":
		return t + " " + g.Describe(i)
	default:
		return t
	}
}

// TopKinds formats the n most frequent kinds of counts.
func TopKinds(counts map[string]int, n int) string {
	type kc struct {
		k string
		c int
	}
	var all []kc
	for k, c := range counts {
		all = append(all, kc{k, c})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].c > all[j].c || all[i].c == all[j].c && all[i].k < all[j].k })
	var parts []string
	for i, e := range all {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.c))
	}
	return strings.Join(parts, ", ")
}
