package rubyvm

import (
	"fmt"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// The VM's tables of names and values as small readers of objects: ID
// tables (a class's constants, the global variables), st_tables and
// Hashes. The heap dump writes what they hold; the proof of a release
// (version.go) reads Object's constants through them.

// maxIDTable bounds the capacity of an rb_id_table read (the global
// variable table, constant tables).
const maxIDTable = 1 << 20

// idTableItems reads the items of the rb_id_table at the address held in
// tblAddr.
func (v *VM) idTableItems(tblAddr uint64) ([]byte, int, bool) {
	tbl, err := v.m.u64(tblAddr)
	if err != nil {
		return nil, 0, false
	}
	return v.IDTable(tbl)
}

// IDTable reads the items of the rb_id_table at tbl: capa items of
// IDItemSize bytes, a zero key marking a free one (none in an empty
// table). Ruby keeps capa a power of two.
func (v *VM) IDTable(tbl uint64) ([]byte, int, bool) {
	L := v.Layout
	if tbl == 0 {
		return nil, 0, false
	}
	head, err := v.m.read(tbl, int(L.IDTableItems)+8)
	if err != nil {
		return nil, 0, false
	}
	capa := int(int32(le32(head, L.IDTableCapa)))
	items := le64(head, L.IDTableItems)
	if capa == 0 {
		return nil, 0, true
	}
	if capa < 0 || capa > maxIDTable || capa&(capa-1) != 0 || items == 0 {
		return nil, 0, false
	}
	raw, err := v.m.read(items, capa*int(L.IDItemSize))
	if err != nil {
		return nil, 0, false
	}
	return raw, capa, true
}

// IDTableEach calls fn with the key (an ID's serial) and the value of
// each used item of an rb_id_table's items as IDTable read them.
func IDTableEach(L *layout.Layout, items []byte, capa int, fn func(serial uint64, val uint64)) {
	for i := range capa {
		it := items[i*int(L.IDItemSize):]
		if key := le32(it, L.IDItemKey); key != 0 {
			fn(uint64(key), le64(it, L.IDItemVal))
		}
	}
}

// maxConstTable bounds the capacity of a constant table constants reads,
// each of whose keys is named by a few reads (Object's holds a few hundred).
const maxConstTable = 1 << 14

// constants returns the values of the constants of class or module klass
// named in names that its constant table holds (RCLASS_CONST_TBL: an
// rb_id_table from the serial of each constant's ID to its
// rb_const_entry_t), by name. Each key is named through the global
// symbols, so a constant whose name cannot be read is not found.
func (v *VM) constants(klass uint64, names ...string) (map[string]uint64, error) {
	L := v.Layout
	if typ, _, err := v.objType(klass); err != nil || (typ != L.TClass && typ != L.TModule) {
		return nil, fmt.Errorf("%#x is not a class or module: %w", klass, ErrGarbage)
	}
	ext, err := v.ClassExt(klass)
	if err != nil {
		return nil, fmt.Errorf("its classext: %w", err)
	}
	tbl, err := v.m.u64(at(ext, L.ClassExtConstTbl))
	if err != nil {
		return nil, fmt.Errorf("its constant table (rb_classext_struct.const_tbl at %d): %w", L.ClassExtConstTbl, err)
	}
	items, capa, ok := v.IDTable(tbl)
	if !ok || capa > maxConstTable {
		return nil, fmt.Errorf("its constant table %#x (rb_classext_struct.const_tbl at %d) is no ID table of at most %d items: %w", tbl, L.ClassExtConstTbl, maxConstTable, ErrGarbage)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]uint64{}
	IDTableEach(L, items, capa, func(serial, ce uint64) {
		if len(out) == len(want) {
			return
		}
		name, err := v.serialName(serial)
		if err != nil || !want[name] {
			return
		}
		if val, err := v.m.u64(at(ce, L.ConstEntryValue)); err == nil {
			out[name] = val
		}
	})
	return out, nil
}

// StEach calls fn with the key and record of each live entry of the
// st_table whose head is given, reading the entries through read, at most
// chunk at a time (fn must not keep read's buffer, nor call read when read
// reuses it). A table of more than limit entries is refused.
func StEach(L *layout.Layout, head []byte, limit, chunk uint64, read func(addr uint64, n int) ([]byte, error), fn func(key, rec uint64)) error {
	start, bound := le64(head, L.StEntriesStart), le64(head, L.StEntriesBound)
	entries := le64(head, L.StEntries)
	if bound < start || bound-start > limit {
		return fmt.Errorf("an st_table's entries %d to %d: %w", start, bound, ErrGarbage)
	}
	esz := uint64(L.StEntrySize)
	for i := start; i < bound; {
		k := min(bound-i, chunk)
		b, err := read(entries+i*esz, int(k*esz))
		if err != nil {
			return err
		}
		for j := range k {
			e := b[j*esz:]
			if le64(e, L.StEntryHash) == ^uint64(0) { // deleted
				continue
			}
			fn(le64(e, L.StEntryKey), le64(e, L.StEntryRecord))
		}
		i += k
	}
	return nil
}

// RHashTable is where a Hash keeps its pairs: its st_table (ST, the
// table's head), or its ar_table (AR, Bound pairs of a key and a value,
// a Qundef key marking a free one; nil when none is allocated).
type RHashTable struct {
	ST          []byte
	AR          []byte
	Size, Bound uint64 // the ar_table's, from the flags
	ARApart     bool   // the ar_table was allocated apart from the slot
}

// hashSlotLen is how many bytes of a Hash's slot HashTableOf needs: its
// struct RHash, and the table Rubies that keep it in the slot keep there
// (3.3 on).
func hashSlotLen(L *layout.Layout, flags uint64) int64 {
	switch {
	case flags&uint64(L.RHashSTFlag) != 0 && L.RHashST < 0:
		return L.RHashSize + L.StEntries + 8
	case flags&uint64(L.RHashSTFlag) == 0 && L.RHashAR < 0:
		return L.RHashSize + L.ARTablePairs + L.ARTableMax*16
	}
	return L.RHashSize
}

// HashTableOf finds the table of the Hash whose flags and slot (at least
// hashSlotLen bytes of it) are given, reading what lies outside the slot
// through read (whose buffer it keeps: read must not reuse it).
func HashTableOf(L *layout.Layout, slot []byte, flags uint64, read func(addr uint64, n int) ([]byte, error)) (RHashTable, error) {
	if int64(len(slot)) < L.RHashSize {
		return RHashTable{}, fmt.Errorf("a Hash's slot of %d bytes: %w", len(slot), ErrGarbage)
	}
	if flags&uint64(L.RHashSTFlag) != 0 {
		if L.RHashST < 0 { // 3.3: the st_table is in the slot after struct RHash
			if L.RHashSize+L.StEntries+8 > int64(len(slot)) {
				return RHashTable{}, fmt.Errorf("a Hash's st_table past its slot: %w", ErrGarbage)
			}
			return RHashTable{ST: slot[L.RHashSize:]}, nil
		}
		b, err := read(le64(slot, L.RHashST), int(L.StEntries)+8)
		if err != nil {
			return RHashTable{}, err
		}
		return RHashTable{ST: b}, nil
	}
	t := RHashTable{
		Size:  (flags & uint64(L.RHashARSizeMask)) >> uint64(L.RHashARSizeShift),
		Bound: (flags & uint64(L.RHashARBoundMask)) >> uint64(L.RHashARBoundShift),
	}
	if t.Bound > uint64(L.ARTableMax) || t.Size > t.Bound {
		return t, fmt.Errorf("a Hash's ar_table of %d pairs within %d: %w", t.Size, t.Bound, ErrGarbage)
	}
	if L.RHashAR >= 0 {
		if ar := le64(slot, L.RHashAR); ar != 0 {
			b, err := read(ar+uint64(L.ARTablePairs), int(L.ARTableMax)*16)
			if err != nil {
				return t, err
			}
			t.AR, t.ARApart = b, true
		}
		return t, nil
	}
	off := L.RHashSize + L.ARTablePairs
	if off+int64(t.Bound)*16 > int64(len(slot)) {
		return t, fmt.Errorf("a Hash's ar_table past its slot: %w", ErrGarbage)
	}
	t.AR = slot[off:]
	return t, nil
}

// maxHashPairs bounds the pairs of a Hash hashPairs reads.
const maxHashPairs = 1 << 16

// hashPairs returns the keys and values of the Hash obj.
func (v *VM) hashPairs(obj uint64) ([][2]uint64, error) {
	L := v.Layout
	typ, flags, err := v.objType(obj)
	if err != nil {
		return nil, err
	}
	if typ != L.THash {
		return nil, fmt.Errorf("object %#x is type %d, not a Hash: %w", obj, typ, ErrGarbage)
	}
	slot, err := v.m.read(obj, int(hashSlotLen(L, flags)))
	if err != nil {
		return nil, err
	}
	t, err := HashTableOf(L, slot, flags, v.m.read)
	if err != nil {
		return nil, err
	}
	var pairs [][2]uint64
	if t.ST != nil {
		err := StEach(L, t.ST, maxHashPairs, 1024, v.m.read, func(k, val uint64) { pairs = append(pairs, [2]uint64{k, val}) })
		return pairs, err
	}
	for i := uint64(0); i < t.Bound && t.AR != nil; i++ {
		if k := le64(t.AR, int64(i*16)); k != uint64(L.Qundef) {
			pairs = append(pairs, [2]uint64{k, le64(t.AR, int64(i*16+8))})
		}
	}
	return pairs, nil
}
