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
}

// same tells whether object i of x and object j of y are the same object:
// same address, type and class.
func same(x *Graph, i int, y *Graph, j int) bool {
	return x.Type(i) == y.Type(j) && x.ClassAddress(i) == y.ClassAddress(j)
}

// Diff returns the objects of b that are not in a: an address a has no
// object at, or one whose type or class differs (the slot was freed and
// reused).
func Diff(a, b *Graph) *DiffResult {
	type classKey struct {
		class uint32
		typ   uint8
	}
	type siteKey struct {
		site, class uint32
		typ         uint8
	}
	res := &DiffResult{}
	byClass := map[classKey]*DiffRow{}
	bySite := map[siteKey]*DiffRow{}
	for j := 0; j < b.Len(); j++ {
		if i, ok := a.Lookup(b.addr[j]); ok && same(a, i, b, j) {
			continue
		}
		m := b.Memsize(j)
		res.NewObjects++
		res.NewBytes += m
		ck := classKey{b.class[j], b.typ[j]}
		r := byClass[ck]
		if r == nil {
			r = &DiffRow{Class: b.ClassName(j), Type: b.Type(j)}
			byClass[ck] = r
		}
		r.Count++
		r.Bytes += m
		sk := siteKey{b.site[j], b.class[j], b.typ[j]}
		if sk.site != 0 {
			res.SitesKnown++
		}
		r = bySite[sk]
		if r == nil {
			r = &DiffRow{Class: b.ClassName(j), Type: b.Type(j)}
			if s, ok := b.Site(j); ok {
				r.Site = s.String()
			}
			bySite[sk] = r
		}
		r.Count++
		r.Bytes += m
	}
	for i := 0; i < a.Len(); i++ {
		if j, ok := b.Lookup(a.addr[i]); ok && same(a, i, b, j) {
			continue
		}
		res.GoneObjects++
		res.GoneBytes += a.Memsize(i)
	}
	res.ByClass = sortedRows(byClass)
	res.BySite = sortedRows(bySite)
	return res
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
