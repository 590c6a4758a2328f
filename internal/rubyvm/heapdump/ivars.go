package heapdump

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/rubyvm"
)

// The names of instance variables, which dump_all does not write: a dump
// line of an object (T_OBJECT) or a class or module with instance
// variables carries them, with their values, in "instance_variables" (see
// docs/heap.md). Ruby 3.2+ names an object's ivar slots by its shape (the
// chain of SHAPE_IVAR shapes from the object's shape to the root, each
// naming one slot); 2.7 and 3.1 by the iv_index_tbl of the object's class;
// a too-complex object's (and a 2.7 or 3.1 class's) ivars are a table from
// the ID to the value.

// ivarSlot names one instance variable: its name and the index of its slot
// in the object's ivar array.
type ivarSlot struct {
	name  string
	index uint64
}

// maxShapeChain bounds the shapes walked from an object's shape to the
// root: one per instance variable (at most maxIvars) and a few others
// (frozen, T_OBJECT, capacity changes); the walk of one chain stops sooner,
// past its first shape's count of ivars and 64 others.
const maxShapeChain = maxIvars + 64

// maxIvarCache bounds the entries of each cache of ivar names.
const maxIvarCache = 1 << 18

// invalidShapeID is INVALID_SHAPE_ID, the root's parent.
const invalidShapeID = math.MaxUint32

// shapeIvars returns the instance variables shape id names, in the order
// they were set (instance_variables' order); false when the chain could
// not be read. Ivars whose ID has no name (Ruby's internal ones) are left
// out.
func (d *dumper) shapeIvars(id uint64) ([]ivarSlot, bool) {
	return cachedIvars(d.shapeNames, id, d.readShapeIvars)
}

// cachedIvars returns cache's answer for key, or reads it and keeps it
// (a read that failed as nil, an empty list as empty) while the cache
// holds fewer than maxIvarCache answers.
func cachedIvars(cache map[uint64][]ivarSlot, key uint64, read func(uint64) ([]ivarSlot, bool)) ([]ivarSlot, bool) {
	if s, ok := cache[key]; ok {
		return s, s != nil
	}
	s, ok := read(key)
	if !ok {
		s = nil
	} else if s == nil {
		s = []ivarSlot{}
	}
	if len(cache) < maxIvarCache {
		cache[key] = s
	}
	return s, ok
}

func (d *dumper) readShapeIvars(id uint64) ([]ivarSlot, bool) {
	L := d.L
	if d.shapeList == 0 || L.ShapeParentID < 0 || L.ShapeEdgeName < 0 || L.ShapeType < 0 || L.ShapeNextIVIndex < 0 {
		return nil, false
	}
	size := uint64(L.ShapeSize)
	var out []ivarSlot
	idx := shapeIndex(L, id)
	// A chain that holds together names each slot once, its ivars' indexes
	// falling towards the root, and every parent was made before its
	// child (a smaller index): a torn one ends in a few steps.
	limit, last := maxShapeChain, uint64(math.MaxUint64)
	for step := 0; step < limit; step++ {
		if idx >= maxShapeID {
			return nil, false
		}
		b, err := d.read(d.shapeList+idx*size, int(size))
		if err != nil {
			return nil, false
		}
		typ := int64(b[L.ShapeType])
		parent := uint64(le32(b, L.ShapeParentID))
		next := rubyvm.AttrIndex(L, b, L.ShapeNextIVIndex)
		if step == 0 {
			limit = int(min(next, maxIvars)) + 64
		}
		if typ == L.ShapeIvar {
			if next == 0 || next >= last {
				return nil, false
			}
			last = next
			if name, err := d.ivarName(le64(b, L.ShapeEdgeName)); err == nil {
				out = append(out, ivarSlot{name, next - 1})
			}
		}
		if typ == L.ShapeRoot || parent == invalidShapeID {
			slices.Reverse(out)
			return out, true
		}
		if p := shapeIndex(L, parent); p < idx {
			idx = p
			continue
		}
		return nil, false
	}
	return nil, false
}

// smallTable reports whether the st_table whose head is given has few
// enough entries to be an object's instance variables.
func (d *dumper) smallTable(head []byte) bool {
	L := d.L
	start, bound := le64(head, L.StEntriesStart), le64(head, L.StEntriesBound)
	return le64(head, L.StNumEntries) <= maxIvars && bound >= start && bound-start <= 2*maxIvars
}

// classIvarIndex returns the instance variables the iv_index_tbl of the
// class of an object whose klass is given names (2.7, 3.1), by index.
func (d *dumper) classIvarIndex(klass uint64) ([]ivarSlot, bool) {
	L := d.L
	if L.ClassExtIVIndexTbl < 0 {
		return nil, false
	}
	// rb_class_real: past singleton classes and included modules
	for range 64 {
		slot := d.slotAt(klass)
		if slot == nil {
			return nil, false
		}
		flags := le64(slot, L.RBasicFlags)
		if flags&uint64(L.FlSingleton) == 0 && int64(flags&d.tmask) != L.TIClass {
			break
		}
		klass = le64(slot, L.RClassSuper)
	}
	return cachedIvars(d.classNames, klass, d.readClassIvarIndex)
}

func (d *dumper) readClassIvarIndex(klass uint64) ([]ivarSlot, bool) {
	L := d.L
	ext, err := d.v.ClassExt(klass)
	if err != nil || ext == 0 {
		return nil, false
	}
	tbl, err := d.v.Word(at(ext, L.ClassExtIVIndexTbl))
	if err != nil {
		return nil, false
	}
	if tbl == 0 {
		return nil, true // no instance variable was ever set
	}
	h, err := d.read(tbl, int(L.StEntries)+8)
	if err != nil || !d.smallTable(h) {
		return nil, false
	}
	pairs := d.stPairsAt(tbl)
	out := make([]ivarSlot, 0, len(pairs))
	for _, p := range pairs {
		index := p[1]
		if L.IVIndexEntryIndex >= 0 {
			b, err := d.read(at(p[1], L.IVIndexEntryIndex), 4)
			if err != nil {
				return nil, false
			}
			index = uint64(binary.LittleEndian.Uint32(b))
		}
		if index >= maxIvars {
			return nil, false
		}
		if name, err := d.ivarName(p[0]); err == nil {
			out = append(out, ivarSlot{name, index})
		}
	}
	slices.SortFunc(out, func(a, b ivarSlot) int { return int(a.index) - int(b.index) })
	return out, true
}

// ivarsByIndex appends "instance_variables" for the ivars names gives
// among the n values vals holds (an object's or class's ivar array), set
// ones only.
func (d *dumper) ivarsByIndex(names []ivarSlot, vals []uint64) {
	mark := len(d.buf)
	d.key("instance_variables")
	d.buf = append(d.buf, '{')
	wrote := false
	for _, s := range names {
		if s.index >= uint64(len(vals)) {
			continue
		}
		wrote = d.ivarPair(s.name, vals[s.index], wrote) || wrote
	}
	if !wrote {
		d.buf = d.buf[:mark]
		return
	}
	d.buf = append(d.buf, '}')
}

// ivarPair appends `"name":"value"` (after a comma unless first), or
// nothing for an unset ivar or one whose value is not a live object or an
// immediate; it reports whether it appended.
func (d *dumper) ivarPair(name string, val uint64, comma bool) bool {
	mark := len(d.buf)
	if comma {
		d.buf = append(d.buf, ',')
	}
	d.buf = heap.AppendJSONString(d.buf, []byte(name))
	d.buf = append(d.buf, ':')
	if d.v.IsHeapObject(val) {
		if val == uint64(d.L.Qundef) || !d.live(val) {
			d.buf = d.buf[:mark]
			return false
		}
		d.buf = heap.AppendAddr(d.buf, val)
		return true
	}
	s, ok := d.immediate(val)
	if !ok {
		d.buf = d.buf[:mark]
		return false
	}
	d.buf = heap.AppendJSONString(d.buf, []byte(s))
	return true
}

// ivarTable appends "instance_variables" from a table from ID to value
// (a too-complex object's, a 2.7 or 3.1 class's iv_tbl) whose head is
// given, in the table's order; torn tables add nothing.
func (d *dumper) ivarTable(head []byte) {
	if !d.smallTable(head) {
		return
	}
	var pairs [][2]uint64
	if d.stEach(head, func(key, rec uint64) {
		if len(pairs) < maxIvars {
			pairs = append(pairs, [2]uint64{key, rec})
		}
	}) != nil {
		return
	}
	mark := len(d.buf)
	d.key("instance_variables")
	d.buf = append(d.buf, '{')
	wrote := false
	for _, p := range pairs {
		name, err := d.ivarName(p[0])
		if err != nil {
			continue
		}
		wrote = d.ivarPair(name, p[1], wrote) || wrote
	}
	if !wrote {
		d.buf = d.buf[:mark]
		return
	}
	d.buf = append(d.buf, '}')
}

// immediate returns an immediate VALUE as Ruby's inspect shows it (5, nil,
// true, false, :sym, 1.5); false for Qundef and what is no immediate.
func (d *dumper) immediate(val uint64) (string, bool) {
	L := d.L
	switch {
	case val == uint64(L.Qfalse):
		return "false", true
	case val == uint64(L.Qnil):
		return "nil", true
	case val == uint64(L.Qtrue):
		return "true", true
	case val&uint64(L.FixnumFlag) != 0:
		n, _ := d.v.Fixnum(val)
		return strconv.FormatInt(n, 10), true
	case L.FlonumMask > 0 && val&uint64(L.FlonumMask) == uint64(L.FlonumFlag):
		return rubyFloat(flonum(val)), true
	case val&(1<<uint64(L.SpecialShift)-1) == uint64(L.SymbolFlag): // RUBY_STATIC_SYM_P
		name, err := d.ivarName(val >> uint64(L.SpecialShift))
		if err != nil {
			return "", false
		}
		return rubySymbol(name), true
	}
	return "", false
}

// flonum decodes a Flonum VALUE (rb_float_flonum_value).
func flonum(v uint64) float64 {
	if v == 0x8000000000000002 { // 0.0, which the encoding below cannot hold
		return 0
	}
	t := (2 - v>>63) | v&^3
	return math.Float64frombits(t>>3 | t<<61)
}

// rubyFloat formats f as Float#inspect does: the shortest digits that
// read back the same, in fixed notation for exponents from -4 to 14
// ("1.5", "100.0", "0.0001"), else as "1.0e+20".
func rubyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sign := ""
	if math.Signbit(f) {
		sign, f = "-", -f
	}
	if f == 0 {
		return sign + "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	i := strings.IndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	digits := strings.Replace(e[:i], ".", "", 1)
	decpt := exp + 1
	switch {
	case decpt > 0 && decpt < 16:
		if len(digits) <= decpt {
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		}
		return sign + digits[:decpt] + "." + digits[decpt:]
	case decpt <= 0 && decpt > -4:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	}
	frac := digits[1:]
	if frac == "" {
		frac = "0"
	}
	es := strconv.Itoa(abs(decpt - 1))
	if len(es) < 2 {
		es = "0" + es
	}
	esign := "+"
	if decpt-1 < 0 {
		esign = "-"
	}
	return sign + digits[:1] + "." + frac + "e" + esign + es
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// rubySymbol returns a Symbol's inspect: :name for names Ruby prints bare
// (identifiers, with @, @@ or $ before, ? ! or = after, and operators),
// else :"name" with the quote and backslash escaped.
func rubySymbol(name string) string {
	if bareSymbol(name) {
		return ":" + name
	}
	return `:"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `"`
}

// symbolOperators are the operator method names a Symbol shows bare.
var symbolOperators = map[string]bool{
	"+": true, "-": true, "*": true, "/": true, "%": true, "**": true, "==": true, "===": true,
	"!=": true, "<=>": true, "<": true, "<=": true, ">": true, ">=": true, "<<": true, ">>": true,
	"&": true, "|": true, "^": true, "~": true, "!": true, "=~": true, "!~": true, "[]": true,
	"[]=": true, "+@": true, "-@": true, "`": true,
}

func bareSymbol(name string) bool {
	if symbolOperators[name] {
		return true
	}
	s := name
	switch {
	case strings.HasPrefix(s, "@@"):
		s = s[2:]
	case strings.HasPrefix(s, "@"), strings.HasPrefix(s, "$"):
		s = s[1:]
	}
	if s == "" {
		return false
	}
	if s != name { // ivars, cvars and globals take no suffix
		return identifier(s)
	}
	if last := s[len(s)-1]; last == '?' || last == '!' || last == '=' {
		s = s[:len(s)-1]
	}
	return identifier(s)
}

func identifier(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') && c < 0x80 {
			return false
		}
	}
	return true
}

// objectIvars appends "instance_variables" of a T_OBJECT whose n ivar
// slots are in slot (embedded) or behind its ivptr.
func (d *dumper) objectIvars(slot []byte, flags, n uint64, embedded bool) {
	L := d.L
	if n == 0 || n > maxIvars {
		return
	}
	var names []ivarSlot
	var ok bool
	if d.shapeList != 0 {
		names, ok = d.shapeIvars(flags >> uint64(L.ShapeFlagShift))
	} else {
		names, ok = d.classIvarIndex(d.klass)
	}
	if !ok || len(names) == 0 {
		return
	}
	d.ivals = d.ivals[:0]
	if embedded {
		if L.RObjectEmbedAry+int64(n)*8 > int64(len(slot)) {
			return
		}
		for i := range n {
			d.ivals = append(d.ivals, le64(slot, L.RObjectEmbedAry+int64(i)*8))
		}
	} else if !d.readIvals(le64(slot, L.RObjectHeapIVPtr), n) {
		return
	}
	d.ivarsByIndex(names, d.ivals)
}

// readIvals reads n VALUEs at addr into d.ivals.
func (d *dumper) readIvals(addr, n uint64) bool {
	d.ivals = d.ivals[:0]
	b, err := d.read(addr, int(n*8))
	if err != nil {
		return false
	}
	for i := 0; i < len(b); i += 8 {
		d.ivals = append(d.ivals, binary.LittleEndian.Uint64(b[i:]))
	}
	return true
}

// genericIvarNames appends "instance_variables" of an object of another
// type than T_OBJECT whose generic ivars' slots are raw (a gen_ivtbl's):
// named as a T_OBJECT's are, by its shape or its class.
func (d *dumper) genericIvarNames(flags uint64, raw []uint64) {
	var names []ivarSlot
	var ok bool
	if d.shapeList != 0 {
		id := flags >> uint64(d.L.ShapeFlagShift)
		if s := d.shape(id); !s.ok || s.tooComplex {
			return
		}
		names, ok = d.shapeIvars(id)
	} else {
		names, ok = d.classIvarIndex(d.klass)
	}
	if ok && len(names) > 0 {
		d.ivarsByIndex(names, raw)
	}
}

// ivarName returns the name of an ivar's ID, remembering the IDs that
// have none (Ruby's internal ones) so that each costs one lookup.
func (d *dumper) ivarName(id uint64) (string, error) {
	if d.noName[id] {
		return "", errNoName
	}
	name, err := d.v.IDName(id)
	if err != nil && len(d.noName) < maxIvarCache {
		d.noName[id] = true
	}
	return name, err
}

// errNoName: an ID whose name could not be read before.
var errNoName = errors.New("the ID has no name")
