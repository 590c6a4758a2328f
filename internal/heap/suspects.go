package heap

import (
	"cmp"
	"slices"
)

// Suspect is one place where a later dump of a process grew: an object
// both dumps hold (the holder) that, in the later dump, dominates objects
// the earlier one lacks. Freeing the holder, or what it keeps, frees them.
// A leak through a cache (a Hash in a constant) or a callback list (an
// Array of Procs) shows as that Hash or Array.
type Suspect struct {
	// Holder is the holder in the later dump; FromRoots is set instead
	// when no single object holds the new objects (the root sets do).
	Holder    Hop
	FromRoots bool
	// Retained is what the holder retains in the later dump.
	Retained uint64
	// NewObjects and NewBytes count the new objects the holder dominates.
	NewObjects, NewBytes uint64
	// Classes groups them by class and type, Sites by allocation site
	// (when the dump has sites), largest first, at most SuspectRows each.
	Classes, Sites []DiffRow
	// Path is the holder's shortest path from the roots (none for
	// FromRoots).
	Path *Path
}

// SuspectRows is how many groups of its new objects a Suspect lists.
const SuspectRows = 5

// Suspects finds where b, a later dump of the process a was dumped from,
// grew: each object of b that a lacks (as Diff counts them) is charged to
// its nearest dominator that a has too, and those holders are ranked by
// the bytes of the new objects they dominate; it returns the largest n.
// d is b's dominator tree. New objects that no root reaches (garbage not
// yet collected) are left out.
func Suspects(a, b *Graph, d *DomTree, n int) []Suspect {
	fresh, _, _ := newIn(a, b)
	return suspects(b, d, fresh, n)
}

// DiffSuspects returns both Diff(a, b) and Suspects(a, b, d, n), comparing
// the two dumps once.
func DiffSuspects(a, b *Graph, d *DomTree, n int) (*DiffResult, []Suspect) {
	fresh, gone, goneBytes := newIn(a, b)
	return diff(b, fresh, gone, goneBytes), suspects(b, d, fresh, n)
}

// Suspects3 is Suspects over three dumps a, b and c of one process, taken
// in that order: the objects charged are those new in b (against a) that
// c still holds (as Diff3 keeps them), each to its nearest dominator in c
// that is not one of them. What the window between a and b leaked stands
// alone, without what c holds in flight. d is c's dominator tree.
func Suspects3(a, b, c *Graph, d *DomTree, n int) []Suspect {
	fresh := make([]bool, c.Len())
	for j := range fresh {
		i, ok := b.Lookup(c.addr[j])
		fresh[j] = ok && same(b, i, c, j) && isNew(a, b, i)
	}
	return suspects(c, d, fresh, n)
}

// suspects charges each object of b that fresh marks to its nearest
// dominator that fresh does not mark, and returns the n holders that keep
// the most bytes of them. d is b's dominator tree.
func suspects(b *Graph, d *DomTree, fresh []bool, n int) []Suspect {
	N := b.Len()
	// holder[j]: the nearest dominator of j that is not new (an object
	// number, or super for the roots), found by walking up the dominator
	// tree and remembered for every object on the way.
	const unknown, super = -2, -1
	holder := make([]int32, N)
	for j := range holder {
		holder[j] = unknown
	}
	var chain []int
	type acc struct {
		objects, bytes uint64
		groups         *groupCounter
	}
	groups := map[int32]*acc{}
	for j := 0; j < N; j++ {
		if !fresh[j] {
			continue
		}
		if _, ok := d.Idom(j); !ok {
			continue // unreachable
		}
		chain = chain[:0]
		h := int32(unknown)
		for k := j; ; {
			if holder[k] != unknown {
				h = holder[k]
				break
			}
			chain = append(chain, k)
			up, _ := d.Idom(k)
			if up < 0 {
				h = super
				break
			}
			if !fresh[up] {
				h = int32(up)
				break
			}
			k = up
		}
		for _, k := range chain {
			holder[k] = h
		}
		g := groups[h]
		if g == nil {
			g = &acc{groups: newGroupCounter()}
			groups[h] = g
		}
		m := b.Memsize(j)
		g.objects++
		g.bytes += m
		g.groups.add(b, j, m)
	}
	keys := make([]int32, 0, len(groups))
	for h := range groups {
		keys = append(keys, h)
	}
	slices.SortFunc(keys, func(x, y int32) int {
		return cmp.Or(cmp.Compare(groups[y].bytes, groups[x].bytes), cmp.Compare(x, y))
	})
	if n >= 0 && len(keys) > n {
		keys = keys[:n]
	}
	var holders []int
	for _, h := range keys {
		if h != super {
			holders = append(holders, int(h))
		}
	}
	paths := ShortestPaths(b, holders)
	out := make([]Suspect, 0, len(keys))
	for _, h := range keys {
		g := groups[h]
		s := Suspect{NewObjects: g.objects, NewBytes: g.bytes, Classes: topRows(g.groups.byClass)}
		if g.groups.sitesKnown > 0 {
			s.Sites = topRows(g.groups.bySite)
		}
		if h == super {
			s.FromRoots = true
		} else {
			s.Holder = b.Hop(int(h))
			s.Retained = d.Retained[h]
			if p, ok := paths[int(h)]; ok {
				s.Path = &p
			}
		}
		out = append(out, s)
	}
	return out
}

// topRows returns the SuspectRows largest rows of m.
func topRows[K comparable](m map[K]*DiffRow) []DiffRow {
	rows := sortedRows(m)
	if len(rows) > SuspectRows {
		rows = rows[:SuspectRows]
	}
	return rows
}
