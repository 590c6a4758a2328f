package ui

import (
	"sync"

	"github.com/rbscope/rbscope/internal/heap"
)

// heapWaste is what the Waste view shows of a dump, computed once.
type heapWaste struct {
	once                      sync.Once
	dups                      []heap.DupString // the maxLimit largest
	wasted                    uint64
	emptyByClass, emptyBySite []heap.DiffRow
}

// waste returns the dump's waste, computing it on first use.
func (ix *heapIndex) waste() *heapWaste {
	w := &ix.wasteMemo
	w.once.Do(func() {
		w.dups, w.wasted = heap.DuplicateStrings(ix.g, maxLimit)
		w.emptyByClass, w.emptyBySite = heap.EmptyCollections(ix.g)
	})
	return w
}

// maxSuspects is how many leak suspects a comparison keeps.
const maxSuspects = 100

// heapPair is what the comparison of two dumps (before, after) finds,
// computed once per pair: a dump of millions of objects takes a second.
type heapPair struct {
	once     sync.Once
	diff     *heap.DiffResult
	suspects []heap.Suspect // the maxSuspects largest
}

// pairs holds the comparisons made so far, by file IDs.
type pairs struct {
	mu sync.Mutex
	m  map[[2]int]*heapPair
}

// of returns the comparison of before and after, diffed on first use;
// withSuspects finds the leak suspects too, on first use.
func (ps *pairs) of(before, after *file, withSuspects bool) *heapPair {
	ps.mu.Lock()
	if ps.m == nil {
		ps.m = map[[2]int]*heapPair{}
	}
	p := ps.m[[2]int{before.ID, after.ID}]
	if p == nil {
		p = &heapPair{}
		ps.m[[2]int{before.ID, after.ID}] = p
	}
	ps.mu.Unlock()
	p.once.Do(func() { p.diff = heap.Diff(before.heap.g, after.heap.g) })
	if withSuspects {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if p.suspects == nil {
			p.suspects = heap.Suspects(before.heap.g, after.heap.g, after.heap.d, maxSuspects)
		}
	}
	return p
}
