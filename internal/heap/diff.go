package heap

import (
	"cmp"
	"slices"
)

// DiffRow is a group of objects new in the second dump.
type DiffRow struct {
	Class string // "" for objects without a class (IMEMO, hidden)
	Type  string
	// Site is the allocation site "file:line" (BySite rows only; "" when
	// the dump does not say).
	Site  string
	Count uint64
	Bytes uint64
}

// DiffResult is what Diff finds.
type DiffResult struct {
	// NewObjects and NewBytes count the objects of B that A lacks.
	NewObjects, NewBytes uint64
	// GoneObjects and GoneBytes count the objects of A that B lacks.
	GoneObjects, GoneBytes uint64
	// ByClass groups the new objects by class name and type, BySite by
	// allocation site, class name and type; both largest (bytes) first.
	ByClass, BySite []DiffRow
	// SitesKnown counts the new objects with an allocation site.
	SitesKnown uint64
	// Three is set by Diff3: the rows and SitesKnown are of the objects
	// new in the second dump that the third still holds, KeptObjects and
	// KeptBytes count them.
	Three                  bool
	KeptObjects, KeptBytes uint64
}

// same tells whether object i of x and object j of y, at one address, are
// the same object: same type and class, and where both dumps carry
// allocation sites, the same site. A slot freed between the dumps is
// often taken again by an object of the same class (a request's garbage
// String by the String a cache keeps); its site, when known, tells them
// apart.
func same(x *Graph, i int, y *Graph, j int) bool {
	if x.Type(i) != y.Type(j) || x.ClassAddress(i) != y.ClassAddress(j) {
		return false
	}
	if x.HasSites() && y.HasSites() {
		si, oki := x.Site(i)
		sj, okj := y.Site(j)
		return oki == okj && si == sj
	}
	return true
}

// isNew tells whether object j of b is one that a lacks: an address a has
// no object at, or one whose type or class differs (the slot was freed
// and reused).
func isNew(a, b *Graph, j int) bool {
	i, ok := a.Lookup(b.addr[j])
	return !ok || !same(a, i, b, j)
}

// newIn compares dumps a and b of one process object for object: fresh[j]
// tells whether object j of b is new (isNew), gone and goneBytes count
// the objects of a that b lacks. It walks both dumps' objects in address
// order at once, as each keeps them sorted, rather than looking each
// address up in the other: a dump of millions of objects is compared in
// a fraction of the time.
func newIn(a, b *Graph) (fresh []bool, gone, goneBytes uint64) {
	na, nb := a.Len(), b.Len()
	fresh = make([]bool, nb)
	x, y := 0, 0
	for x < na || y < nb {
		switch {
		case y == nb || x < na && a.sortedAddr(x) < b.sortedAddr(y):
			gone++
			goneBytes += a.Memsize(a.objectAt(x))
			x++
		case x == na || b.sortedAddr(y) < a.sortedAddr(x):
			fresh[b.objectAt(y)] = true
			y++
		default: // one address in both
			if i, j := a.objectAt(x), b.objectAt(y); !same(a, i, b, j) {
				fresh[j] = true
				gone++
				goneBytes += a.Memsize(i)
			}
			x++
			y++
		}
	}
	return fresh, gone, goneBytes
}

// Diff returns the objects of b that are not in a (isNew).
func Diff(a, b *Graph) *DiffResult {
	fresh, gone, goneBytes := newIn(a, b)
	return diff(b, fresh, gone, goneBytes)
}

// diff groups the objects of b that fresh marks new, and tells the
// objects gone since the dump before.
func diff(b *Graph, fresh []bool, gone, goneBytes uint64) *DiffResult {
	res := &DiffResult{}
	c := newGroupCounter()
	for j, isNew := range fresh {
		if !isNew {
			continue
		}
		m := b.Memsize(j)
		res.NewObjects++
		res.NewBytes += m
		c.add(b, j, m)
	}
	res.GoneObjects, res.GoneBytes = gone, goneBytes
	res.ByClass = sortedRows(c.byClass)
	res.BySite = sortedRows(c.bySite)
	res.SitesKnown = c.sitesKnown
	return res
}

// groupCounter counts objects of a dump by class and type, and by
// allocation site, class and type.
type groupCounter struct {
	byClass    map[classKey]*DiffRow
	bySite     map[siteKey]*DiffRow
	sitesKnown uint64 // objects with a site
}

type classKey struct {
	class uint32
	typ   uint8
}

type siteKey struct {
	site, class uint32
	typ         uint8
}

func newGroupCounter() *groupCounter {
	return &groupCounter{byClass: map[classKey]*DiffRow{}, bySite: map[siteKey]*DiffRow{}}
}

// add counts object j of g, of m bytes.
func (c *groupCounter) add(g *Graph, j int, m uint64) {
	ck := classKey{g.class[j], g.typ[j]}
	r := c.byClass[ck]
	if r == nil {
		r = &DiffRow{Class: g.ClassName(j), Type: g.Type(j)}
		c.byClass[ck] = r
	}
	r.Count++
	r.Bytes += m
	sk := siteKey{g.site[j], g.class[j], g.typ[j]}
	if sk.site != 0 {
		c.sitesKnown++
	}
	r = c.bySite[sk]
	if r == nil {
		r = &DiffRow{Class: g.ClassName(j), Type: g.Type(j)}
		if s, ok := g.Site(j); ok {
			r.Site = s.String()
		}
		c.bySite[sk] = r
	}
	r.Count++
	r.Bytes += m
}

func sortedRows[K comparable](m map[K]*DiffRow) []DiffRow {
	rows := make([]DiffRow, 0, len(m))
	for _, r := range m {
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(x, y DiffRow) int {
		return cmp.Or(
			cmp.Compare(y.Bytes, x.Bytes),
			cmp.Compare(y.Count, x.Count),
			cmp.Compare(x.Class, y.Class),
			cmp.Compare(x.Type, y.Type),
			cmp.Compare(x.Site, y.Site))
	})
	return rows
}

// Rows returns the largest top rows grouped by class ("class") or by
// allocation site ("site"), all of them when top is 0, and how many more
// there are.
func (d *DiffResult) Rows(by string, top int) (rows []DiffRow, more int) {
	rows = d.ByClass
	if by == "site" {
		rows = d.BySite
	}
	if top > 0 && len(rows) > top {
		return rows[:top], len(rows) - top
	}
	return rows, 0
}

// Diff3 compares three dumps of one process, taken in that order, as
// heapy does: the objects new in b (against a) that c still holds. What
// one window of requests allocated and kept past the next window is the
// leak; what it allocated and freed meanwhile, and what only the latest
// window holds in flight, is not. The counts of Diff(a, b) stay (new and
// gone in b); ByClass, BySite and SitesKnown describe the kept objects,
// as c has them, and Kept counts them.
func Diff3(a, b, c *Graph) *DiffResult {
	res := Diff(a, b)
	res.Three = true
	g := newGroupCounter()
	for j := 0; j < c.Len(); j++ {
		i, ok := b.Lookup(c.addr[j])
		if !ok || !same(b, i, c, j) || !isNew(a, b, i) {
			continue
		}
		m := c.Memsize(j)
		res.KeptObjects++
		res.KeptBytes += m
		g.add(c, j, m)
	}
	res.ByClass = sortedRows(g.byClass)
	res.BySite = sortedRows(g.bySite)
	res.SitesKnown = g.sitesKnown
	return res
}
