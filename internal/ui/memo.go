package ui

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"sync"

	"github.com/rbscope/rbscope/internal/diskcache"
	"github.com/rbscope/rbscope/internal/heap"
)

// heapWaste is what the Waste view shows of a dump, found in the
// background from the moment the dump's graph is read (startWaste).
type heapWaste struct {
	done                      chan struct{}
	dups                      []heap.DupString // the maxLimit largest
	wasted                    uint64
	emptyByClass, emptyBySite []heap.DiffRow
	oversized                 []heap.Oversized // the maxLimit largest
	overByClass, overBySite   []heap.DiffRow
	spare                     uint64
}

// startWaste begins finding g's waste in the background, while the
// index is written and its rows built, so that it is ready with the dump
// rather than computed when the Waste view is first asked for, beside
// the comparisons then under way.
func startWaste(g *heap.Graph) *heapWaste {
	w := &heapWaste{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.dups, w.wasted = heap.DuplicateStrings(g, maxLimit)
		w.emptyByClass, w.emptyBySite = heap.EmptyCollections(g)
		w.oversized, w.overByClass, w.overBySite, w.spare = heap.OversizedCollections(g, maxLimit)
	}()
	return w
}

// wasteRecord is a dump's waste as its index file keeps it.
type wasteRecord struct {
	Objects                   int // the dump's, checked when read back
	Dups                      []heap.DupString
	Wasted                    uint64
	EmptyByClass, EmptyBySite []heap.DiffRow
	Oversized                 []heap.Oversized
	OverByClass, OverBySite   []heap.DiffRow
	Spare                     uint64
}

// record returns w, found, as the index of g keeps it.
func (w *heapWaste) record(g *heap.Graph) wasteRecord {
	<-w.done
	return wasteRecord{Objects: g.Len(), Dups: w.dups, Wasted: w.wasted, EmptyByClass: w.emptyByClass, EmptyBySite: w.emptyBySite,
		Oversized: w.oversized, OverByClass: w.overByClass, OverBySite: w.overBySite, Spare: w.spare}
}

// wasteOf returns the waste of g an index kept, nil when it is not of g.
func wasteOf(rec wasteRecord, g *heap.Graph) *heapWaste {
	if rec.Objects != g.Len() {
		return nil
	}
	for _, d := range rec.Dups {
		if d.Example < 0 || d.Example >= g.Len() {
			return nil
		}
	}
	for _, o := range rec.Oversized {
		if o.Object < 0 || o.Object >= g.Len() {
			return nil
		}
	}
	w := &heapWaste{done: make(chan struct{}), dups: rec.Dups, wasted: rec.Wasted, emptyByClass: rec.EmptyByClass, emptyBySite: rec.EmptyBySite,
		oversized: rec.Oversized, overByClass: rec.OverByClass, overBySite: rec.OverBySite, spare: rec.Spare}
	close(w.done)
	return w
}

// waste returns the dump's waste, waiting for it if it is not found yet.
func (ix *heapIndex) waste() *heapWaste {
	<-ix.wasteMemo.done
	return ix.wasteMemo
}

// maxSuspects is how many leak suspects a comparison keeps.
const maxSuspects = 100

// heapPair is what the comparison of two dumps (before, after) finds,
// computed once per pair, each part on first use, or read back whole
// from the pair file an earlier server wrote (pairs.dir).
type heapPair struct {
	storedOnce             sync.Once
	stored                 bool // read back: diff and suspects both set
	diffOnce, suspectsOnce sync.Once
	diff                   *heap.DiffResult
	suspects               []heap.Suspect // the maxSuspects largest
}

// pairs holds the comparisons made so far, by file IDs.
type pairs struct {
	// kept keeps each comparison made in a file named after the states
	// of its two dumps (0600, written whole; CACHE/heap-pairs), read back
	// by a later server that compares them again; nil keeps none.
	kept *diskcache.Cache
	mu   sync.Mutex
	m    map[[2]int]*heapPair
}

// of returns the comparison of before and after, diffed on first use;
// withSuspects finds the leak suspects too, on first use. Each pair is
// computed on its own: one under way keeps no other waiting.
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
	p.storedOnce.Do(func() { p.stored = ps.load(before, after, p) })
	if p.stored {
		return p
	}
	a, b := before.heap.g, after.heap.g
	if !withSuspects {
		p.diffOnce.Do(func() { p.diff = heap.Diff(a, b) })
		return p
	}
	p.suspectsOnce.Do(func() {
		// Both from one comparison of the dumps, unless the diff was
		// asked for alone first.
		both := false
		p.diffOnce.Do(func() {
			p.diff, p.suspects = heap.DiffSuspects(a, b, after.heap.d, maxSuspects)
			both = true
		})
		if !both {
			p.suspects = heap.Suspects(a, b, after.heap.d, maxSuspects)
		}
		ps.save(before, after, p)
	})
	return p
}

// pairVersion is the version of the pair files' form; another is not
// read.
const pairVersion = 1

// pairRecord is a pair file: the comparison of the dumps in the states
// Before and After.
type pairRecord struct {
	Version       int
	Before, After dumpKey
	Objects       int // the later dump's, checked when read back
	Diff          *heap.DiffResult
	Suspects      []heap.Suspect
}

// pairName returns the name of the file of the comparison of before and
// after.
func pairName(before, after *file) string {
	sum := sha256.Sum256(append(before.heap.key.bytes(), after.heap.key.bytes()...))
	return hex.EncodeToString(sum[:12]) + ".rbscope-pair"
}

// load reads into p the comparison of before and after an earlier server
// kept, telling whether there was one of these very dump states.
func (ps *pairs) load(before, after *file, p *heapPair) bool {
	b, err := ps.kept.Load(pairName(before, after))
	if err != nil {
		return false
	}
	var rec pairRecord
	n := after.heap.g.Len()
	if gob.NewDecoder(bytes.NewReader(b)).Decode(&rec) != nil || rec.Version != pairVersion ||
		rec.Before != before.heap.key || rec.After != after.heap.key || rec.Objects != n || rec.Diff == nil {
		return false
	}
	// The holders and paths name objects of the later dump.
	for _, s := range rec.Suspects {
		hops := []heap.Hop{s.Holder}
		if s.Path != nil {
			hops = append(hops, s.Path.Hops...)
		}
		for _, h := range hops {
			if h.Index < 0 || h.Index >= n {
				return false
			}
		}
	}
	p.diff, p.suspects = rec.Diff, rec.Suspects
	return true
}

// save keeps p, the comparison of before and after, for a later server
// (a failure only costs the later server the comparison).
func (ps *pairs) save(before, after *file, p *heapPair) {
	if ps.kept == nil {
		return
	}
	var b bytes.Buffer
	rec := pairRecord{Version: pairVersion, Before: before.heap.key, After: after.heap.key, Objects: after.heap.g.Len(),
		Diff: p.diff, Suspects: p.suspects}
	if gob.NewEncoder(&b).Encode(&rec) == nil {
		ps.kept.Store(pairName(before, after), b.Bytes())
	}
}

// prepare computes, one after another, the comparisons of dump f with
// every other dump open (others, in the order they were given): both
// ways, so that whichever the page asks for answers at once, the one of
// the dump given just before f, before-after, first (the likeliest),
// and the earlier dumps' after it, nearest first.
func (ps *pairs) prepare(f *file, others []*file) {
	for k := len(others) - 1; k >= 0; k-- {
		o := others[k]
		if o.ID < f.ID {
			ps.of(o, f, true)
		} else {
			ps.of(f, o, true)
		}
	}
	for k := len(others) - 1; k >= 0; k-- {
		o := others[k]
		if o.ID < f.ID {
			ps.of(f, o, true)
		} else {
			ps.of(o, f, true)
		}
	}
}
