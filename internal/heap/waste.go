package heap

import (
	"cmp"
	"slices"
	"unsafe"
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
		text                  string // the key's
	}
	str := slices.Index(g.types, "STRING")
	if str < 0 {
		return nil, 0
	}
	// The map sized at once for every String with a value, and the groups
	// in a slice: most values are held once, and growing the map and
	// allocating a group each took most of the time.
	strings := 0
	for i, t := range g.typ {
		if int(t) == str && g.detail[i] != 0 {
			strings++
		}
	}
	groups := make(map[key]int32, strings)
	accs := make([]acc, 0, strings/2)
	for i, t := range g.typ {
		d := g.detail[i]
		if d == 0 || int(t) != str {
			continue
		}
		size := int(g.text[d] & 0x7f)
		// The key reads the dump's text in place: nothing writes it once
		// the dump is loaded.
		k := key{text: unsafe.String(&g.text[d], 1+size)}
		m := g.Memsize(i)
		if g.text[d]&0x80 != 0 {
			k.memsize = m
		}
		at, ok := groups[k]
		if !ok {
			at = int32(len(accs))
			accs = append(accs, acc{first: i, text: k.text})
			groups[k] = at
		}
		a := &accs[at]
		a.count++
		a.bytes += m
		a.largest = max(a.largest, m)
	}
	for _, a := range accs {
		if a.count < 2 {
			continue
		}
		w := a.bytes - a.largest
		wasted += w
		rows = append(rows, DupString{Value: a.text[1:], Cut: a.text[0]&0x80 != 0, Count: a.count, Bytes: a.bytes, Wasted: w, Example: a.first})
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
