package heap

import (
	"cmp"
	"slices"
)

// DupString is a value that several String objects of a dump hold each
// in their own memory: keeping one (freezing and sharing it, or
// String#-@) would save Wasted.
type DupString struct {
	// Value is the value, or its first bytes when Cut: a dump keeps only
	// a prefix of a long String, and then the group is the Strings with
	// that prefix and the same memsize.
	Value string
	Cut   bool
	// Count is how many Strings hold it, Bytes their memsize summed, and
	// Wasted Bytes less the largest one's.
	Count, Bytes, Wasted uint64
	// Example is one of them (the first in the dump).
	Example int
}

// DuplicateStrings returns the n values held by the most wasted bytes, and
// the bytes wasted by every duplicated value. Strings that share another
// String's buffer (copies, substrings) hold no memory of their own and are
// left out, as are those a dump gives no value for (--redact-strings).
func DuplicateStrings(g *Graph, n int) (rows []DupString, wasted uint64) {
	type key struct {
		text    string
		memsize uint64 // of cut values only
	}
	type acc struct {
		count, bytes, largest uint64
		first                 int
	}
	groups := map[key]*acc{}
	for i := 0; i < g.Len(); i++ {
		d := g.detail[i]
		if d == 0 || g.Type(i) != "STRING" {
			continue
		}
		size := int(g.text[d] & 0x7f)
		k := key{text: string(g.text[d : int(d)+1+size])}
		m := g.Memsize(i)
		if g.text[d]&0x80 != 0 {
			k.memsize = m
		}
		a := groups[k]
		if a == nil {
			a = &acc{first: i}
			groups[k] = a
		}
		a.count++
		a.bytes += m
		a.largest = max(a.largest, m)
	}
	for k, a := range groups {
		if a.count < 2 {
			continue
		}
		w := a.bytes - a.largest
		wasted += w
		rows = append(rows, DupString{Value: k.text[1:], Cut: k.text[0]&0x80 != 0, Count: a.count, Bytes: a.bytes, Wasted: w, Example: a.first})
	}
	slices.SortFunc(rows, func(x, y DupString) int {
		return cmp.Or(cmp.Compare(y.Wasted, x.Wasted), cmp.Compare(y.Count, x.Count), cmp.Compare(x.Value, y.Value), cmp.Compare(x.Example, y.Example))
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows, wasted
}

// EmptyCollections counts the Arrays and Hashes of g that hold nothing,
// by class and type and by allocation site: each costs a slot (and a
// Hash that held entries once may keep its table).
func EmptyCollections(g *Graph) (byClass, bySite []DiffRow) {
	c := newGroupCounter()
	for i := 0; i < g.Len(); i++ {
		if t := g.Type(i); (t == "ARRAY" || t == "HASH") && g.detail[i] == 0 {
			c.add(g, i, g.Memsize(i))
		}
	}
	byClass = sortedRows(c.byClass)
	if c.sitesKnown > 0 {
		bySite = sortedRows(c.bySite)
	}
	return byClass, bySite
}
