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

// Oversized is an Array or Hash whose memory is mostly room its elements
// do not use: an Array keeps its buffer at its largest after reject!,
// select!, keep_if, slice! or delete_if (Ruby shrinks it on pop, not on
// those), and on 3.3 and earlier a Hash keeps its table after most of its
// keys were deleted or it was cleared.
type Oversized struct {
	// Object is the collection; Length its elements (Array) or entries
	// (Hash); Bytes its memsize; Spare what Bytes holds beyond what
	// Length elements need (collectionNeed).
	Object       int
	Length       uint64
	Bytes, Spare uint64
}

// Per-element bytes a collection needs, and the rule for too much: an
// Array's element is a pointer; a Hash's entry a hash, a key and a value,
// its bins beside them. A collection is oversized when its memsize is at
// least oversizeFactor times what its elements need with the object's
// slot, and that leaves at least oversizeMin bytes: what Ruby's own
// growth leaves (an Array grown by push holds up to 1.5 times its
// length; a Hash of 17 entries holds 992 bytes on 3.4) stays below.
const (
	arrayElementBytes = 8
	hashEntryBytes    = 32
	slotBytes         = 40
	oversizeFactor    = 4
	oversizeMin       = 1024
)

// collectionSpare returns the bytes object i holds beyond what its
// elements need, when it is an oversized Array or Hash (see Oversized).
func (g *Graph) collectionSpare(i int, array, hash int) (length, spare uint64, ok bool) {
	var per uint64
	switch int(g.typ[i]) {
	case array:
		per = arrayElementBytes
	case hash:
		per = hashEntryBytes
	default:
		return 0, 0, false
	}
	length = uint64(g.detail[i])
	need := slotBytes + per*length
	m := g.Memsize(i)
	if m < oversizeFactor*need || m-need < oversizeMin {
		return 0, 0, false
	}
	return length, m - need, true
}

// OversizedCollections returns the n oversized Arrays and Hashes of g with
// the most spare bytes, and all of them counted by class and type and by
// allocation site (each row's Bytes are the spare bytes), and the spare
// bytes in all.
func OversizedCollections(g *Graph, n int) (top []Oversized, byClass, bySite []DiffRow, spare uint64) {
	array, hash := slices.Index(g.types, "ARRAY"), slices.Index(g.types, "HASH")
	c := newGroupCounter()
	for i := range g.typ {
		length, s, ok := g.collectionSpare(i, array, hash)
		if !ok {
			continue
		}
		spare += s
		c.add(g, i, s)
		top = append(top, Oversized{Object: i, Length: length, Bytes: g.Memsize(i), Spare: s})
	}
	slices.SortFunc(top, func(x, y Oversized) int {
		return cmp.Or(cmp.Compare(y.Spare, x.Spare), cmp.Compare(x.Object, y.Object))
	})
	if len(top) > n {
		top = slices.Clip(top[:n])
	}
	byClass = sortedRows(c.byClass)
	if c.sitesKnown > 0 {
		bySite = sortedRows(c.bySite)
	}
	return top, byClass, bySite, spare
}
