package main

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// A relayout answers the layout queries (layout.Resolver) for x86_64 from
// the DWARF of a build of the same Ruby: it reads each struct's members
// and lays them out again by the LP64 / System V rules, where pointers,
// long and the pointer-sized typedefs are 8 bytes. Before it trusts its
// own rules it lays every struct out by the rules of the ABI the DWARF was
// made for (src) and checks that this reproduces the offsets DWARF
// recorded.
//
// The DWARF is a wasm32 build's, for the families made from one: what the
// preprocessor put into or left out of it cannot be seen there, and the
// family's patch list (patches.go) says what is different on x86_64. Or it
// is an x86_64 debug build's, and the patches are what a later or earlier
// patch release of the family changed (releases.go).
type relayout struct {
	d *dwarf.Data
	// src is the ABI the DWARF was laid out by (checked struct by
	// struct), dst the one the table is for; two *abi values even when
	// both are LP64, so that each keeps its own shapes.
	src, dst *abi
	types    map[string]dwarf.Offset // struct/union name -> DIE
	tdefs    map[string]dwarf.Offset // typedef name -> DIE
	enums    map[string]int64
	conv     map[dwarf.Offset]*ctype
	patches  []patch
	used     map[int]bool // patches that took effect
	answers  map[string]int64
}

type abi struct {
	name string
	long int64 // size and alignment of pointers, long, size_t, VALUE, ...
}

var (
	wasm32 = &abi{"wasm32", 4}
	lp64   = &abi{"x86_64", 8}
	// lp64DWARF is x86_64 as an x86_64 build's DWARF recorded it: a
	// source ABI of its own, so that a struct's members as DWARF has them
	// (the self-check) and as patches leave them (lp64) are two layouts.
	lp64DWARF = &abi{"x86_64 (DWARF)", 8}
)

type ckind int

const (
	kBase ckind = iota
	kPtr
	kEnum
	kTypedef
	kArray
	kStruct
	kUnion
	kBlob // a patch's opaque type of a fixed x86_64 size and alignment
	kVoid // void, functions: only behind pointers
)

// ctype is one C type as the re-layout sees it.
type ctype struct {
	kind    ckind
	name    string // base type, typedef or tag name
	path    string // struct/union: the name patches address it by
	size    int64  // byte size in the wasm32 DWARF (kBlob: on x86_64)
	align   int64  // DW_AT_alignment, or kBlob's alignment
	elem    *ctype // typedef target, array element, enum's underlying type
	count   int64  // array element count, -1 for a flexible array
	members []*cmember
	// orig and origElem are the members and typedef target as DWARF has
	// them, when a patch changed them: the wasm32 self-check uses them
	orig      []*cmember
	hasOrig   bool
	origElem  *ctype
	decl      bool
	synthetic bool // made by a patch: no DWARF to check it against
	packed    bool // DWARF's offsets show it packed
	packLP64  bool // a patch packs it on x86_64
	checked   bool // check has compared its source layout with DWARF
	shapes    map[*abi]*shape
	// pointee is the DIE a pointer points at (hasPointee: it has one)
	pointee    dwarf.Offset
	hasPointee bool
}

// cmember is a struct or union member; a bit-field has bits > 0.
type cmember struct {
	name  string
	typ   *ctype
	bits  int64
	align int64 // DW_AT_alignment
	dwOff int64 // what the wasm32 DWARF says: byte offset, or
	dwBit int64 // for a bit-field the bit offset from the struct start
}

// shape is a struct's layout under one ABI: each member's byte offset (a
// bit-field's bit offset), the size and alignment.
type shape struct {
	size, align int64
	off         []int64
}

func newRelayout(d *dwarf.Data, src *abi, patches []patch) (*relayout, error) {
	r := &relayout{d: d, src: src, dst: lp64, conv: map[dwarf.Offset]*ctype{}, patches: patches,
		used: map[int]bool{}, answers: map[string]int64{}}
	for i, p := range patches {
		if p.op == opAnswer {
			r.answers[p.at] = p.value
			r.used[i] = true
		}
	}
	names, err := layout.ReadNames(d)
	if err != nil {
		return nil, err
	}
	r.types, r.tdefs, r.enums = names.Types, names.Tdefs, names.Enums
	return r, nil
}

// entry reads one DIE and its direct children.
func (r *relayout) entry(off dwarf.Offset) (*dwarf.Entry, []*dwarf.Entry, error) {
	rd := r.d.Reader()
	rd.Seek(off)
	e, err := rd.Next()
	if err != nil {
		return nil, nil, err
	}
	if e == nil {
		return nil, nil, fmt.Errorf("no DIE at %#x", off)
	}
	var kids []*dwarf.Entry
	if e.Children {
		for {
			c, err := rd.Next()
			if err != nil {
				return nil, nil, err
			}
			if c == nil || c.Tag == 0 {
				break
			}
			kids = append(kids, c)
			if c.Children {
				rd.SkipChildren()
			}
		}
	}
	return e, kids, nil
}

func attrInt(e *dwarf.Entry, a dwarf.Attr) (int64, bool) {
	switch v := e.Val(a).(type) {
	case int64:
		return v, true
	case uint64:
		return int64(v), true
	}
	return 0, false
}

// typeAt converts the DIE at off; path names a struct or union that has no
// name of its own (the member path it is reached by).
func (r *relayout) typeAt(off dwarf.Offset, path string) (*ctype, error) {
	if t, ok := r.conv[off]; ok {
		return t, nil
	}
	e, kids, err := r.entry(off)
	if err != nil {
		return nil, err
	}
	name, _ := e.Val(dwarf.AttrName).(string)
	t := &ctype{name: name, shapes: map[*abi]*shape{}}
	t.size, _ = attrInt(e, dwarf.AttrByteSize)
	t.align, _ = attrInt(e, dwarf.AttrAlignment)
	elem := func(p string) (*ctype, error) {
		to, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
		if !ok {
			return &ctype{kind: kVoid, name: "void"}, nil
		}
		return r.typeAt(to, p)
	}
	switch e.Tag {
	case dwarf.TagBaseType:
		t.kind = kBase
	case dwarf.TagPointerType, dwarf.TagReferenceType:
		t.kind = kPtr
		// The pointee is converted only when a "->" path asks for it
		// (pointerTo): converting it here would recurse through every
		// self-referential struct.
		t.pointee, t.hasPointee = e.Val(dwarf.AttrType).(dwarf.Offset)
		t.path = path
	case dwarf.TagSubroutineType:
		t.kind = kVoid
	case dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType, dwarf.TagAtomicType:
		u, err := elem(path)
		if err != nil {
			return nil, err
		}
		r.conv[off] = u
		return u, nil
	case dwarf.TagEnumerationType:
		t.kind = kEnum
		if _, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
			if t.elem, err = elem(""); err != nil {
				return nil, err
			}
		}
	case dwarf.TagTypedef:
		t.kind = kTypedef
		if t.elem, err = elem(name); err != nil {
			return nil, err
		}
		if p, ok := r.typedefPatch(name); ok {
			t.origElem = t.elem
			if t.elem, err = r.spec(p.fields[0].typ); err != nil {
				return nil, fmt.Errorf("patch for typedef %s: %w", name, err)
			}
		}
	case dwarf.TagArrayType:
		t.kind = kArray
		if t.elem, err = elem(path); err != nil {
			return nil, err
		}
		// one subrange per dimension; the outer one is the count (as
		// debug/dwarf reports it), inner ones multiply the element
		var dims []int64
		for _, k := range kids {
			if k.Tag != dwarf.TagSubrangeType {
				continue
			}
			n := int64(-1)
			if c, ok := attrInt(k, dwarf.AttrCount); ok {
				n = c
			} else if ub, ok := attrInt(k, dwarf.AttrUpperBound); ok {
				n = ub + 1
			}
			dims = append(dims, n)
		}
		if len(dims) == 0 {
			dims = []int64{-1}
		}
		for i := len(dims) - 1; i > 0; i-- {
			t.elem = &ctype{kind: kArray, elem: t.elem, count: dims[i], shapes: map[*abi]*shape{}}
		}
		t.count = dims[0]
	case dwarf.TagStructType, dwarf.TagUnionType:
		t.kind = kStruct
		if e.Tag == dwarf.TagUnionType {
			t.kind = kUnion
		}
		t.decl, _ = e.Val(dwarf.AttrDeclaration).(bool)
		t.path = name
		if t.path == "" {
			t.path = path
		}
		r.conv[off] = t // before the members: a member may point back
		for _, k := range kids {
			if k.Tag != dwarf.TagMember {
				continue
			}
			m := &cmember{}
			m.name, _ = k.Val(dwarf.AttrName).(string)
			m.bits, _ = attrInt(k, dwarf.AttrBitSize)
			m.align, _ = attrInt(k, dwarf.AttrAlignment)
			m.dwOff, _ = attrInt(k, dwarf.AttrDataMemberLoc)
			if m.bits > 0 {
				if b, ok := attrInt(k, dwarf.AttrDataBitOffset); ok {
					m.dwBit = b
				} else if b, ok := attrInt(k, dwarf.AttrBitOffset); ok {
					bs, _ := attrInt(k, dwarf.AttrByteSize)
					m.dwBit = m.dwOff*8 + bs*8 - b - m.bits
				} else {
					m.dwBit = m.dwOff * 8
				}
			}
			sub := t.path
			if m.name != "" {
				sub = t.path + "." + m.name
			}
			to, ok := k.Val(dwarf.AttrType).(dwarf.Offset)
			if !ok {
				return nil, fmt.Errorf("%s.%s has no type", t.path, m.name)
			}
			if m.typ, err = r.typeAt(to, sub); err != nil {
				return nil, err
			}
			t.members = append(t.members, m)
		}
		if err := r.applyMemberPatches(t); err != nil {
			return nil, err
		}
		return t, nil
	default:
		return nil, fmt.Errorf("DIE %#x: unexpected %s", off, e.Tag)
	}
	r.conv[off] = t
	return t, nil
}

// longTypedefs are pointer-sized on LP64 whatever their wasm32 spelling.
var longTypedefs = map[string]bool{
	"size_t": true, "ssize_t": true, "VALUE": true, "ID": true, "uintptr_t": true,
	"intptr_t": true, "ptrdiff_t": true, "SIGNED_VALUE": true,
}

func isLongBase(name string) bool {
	return strings.Contains(name, "long") && !strings.Contains(name, "long long") && !strings.Contains(name, "double")
}

// sizeAlign is a type's size and alignment under a.
func (r *relayout) sizeAlign(t *ctype, a *abi) (int64, int64, error) {
	switch t.kind {
	case kBase:
		if isLongBase(t.name) {
			return a.long, a.long, nil
		}
		al := t.size
		if strings.Contains(t.name, "complex") {
			al /= 2
		}
		return t.size, max(al, 1), nil
	case kPtr:
		return a.long, a.long, nil
	case kBlob:
		return t.size, t.align, nil
	case kEnum:
		if t.elem != nil {
			return r.sizeAlign(t.elem, a)
		}
		return t.size, max(t.size, 1), nil
	case kTypedef:
		if longTypedefs[t.name] {
			return a.long, a.long, nil
		}
		elem := t.elem
		if a == r.src && t.origElem != nil {
			elem = t.origElem
		}
		s, al, err := r.sizeAlign(elem, a)
		return s, max(al, t.align), err
	case kArray:
		s, al, err := r.sizeAlign(t.elem, a)
		if t.count < 0 {
			return 0, al, err
		}
		return s * t.count, al, err
	case kStruct, kUnion:
		sh, err := r.layout(t, a)
		if err != nil {
			return 0, 0, err
		}
		return sh.size, sh.align, nil
	}
	return 0, 0, fmt.Errorf("type %s has no size", t.name)
}

func roundUp(n, a int64) int64 {
	if a <= 1 {
		return n
	}
	return (n + a - 1) / a * a
}

// layout lays a struct or union out under a by the System V rules (which
// wasm32 follows too): members in order, each at its alignment; a bit-field
// packs into the current storage unit of its declared type unless it would
// cross one.
func (r *relayout) layout(t *ctype, a *abi) (*shape, error) {
	if sh, ok := t.shapes[a]; ok {
		return sh, nil
	}
	if t.decl {
		return nil, fmt.Errorf("struct %s is incomplete", t.path)
	}
	if !t.synthetic && !t.checked {
		// first check the rules against what the source DWARF recorded
		// (which also tells a packed struct, before any struct that
		// holds it is laid out by the source's rules)
		t.checked = true
		if err := r.check(t); err != nil {
			return nil, err
		}
	}
	sh, err := r.place(t, a, t.packed || a == r.dst && t.packLP64)
	if err != nil {
		return nil, err
	}
	t.shapes[a] = sh
	return sh, nil
}

func (r *relayout) place(t *ctype, a *abi, packed bool) (*shape, error) {
	ms := t.members
	if a == r.src && t.hasOrig {
		ms = t.orig
	}
	sh := &shape{align: max(t.align, 1), off: make([]int64, len(ms))}
	var bit int64 // next free bit
	for i, m := range ms {
		s, al, err := r.sizeAlign(m.typ, a)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t.path, m.name, err)
		}
		if packed {
			al = 1
		}
		al = max(al, m.align)
		sh.align = max(sh.align, al)
		if t.kind == kUnion {
			if m.bits > 0 {
				sh.off[i] = 0
				s = (m.bits + 7) / 8
			}
			sh.size = max(sh.size, s)
			continue
		}
		if m.bits > 0 {
			if !packed && bit%(al*8)+m.bits > s*8 {
				bit = roundUp(bit, al*8)
			}
			sh.off[i] = bit
			bit += m.bits
			continue
		}
		off := roundUp((bit+7)/8, al)
		sh.off[i] = off
		bit = (off + s) * 8
	}
	if t.kind == kStruct {
		sh.size = (bit + 7) / 8
	}
	sh.size = roundUp(sh.size, sh.align)
	return sh, nil
}

// check lays t out by the source ABI's rules and compares with the DWARF; a
// struct that only fits packed is marked so.
func (r *relayout) check(t *ctype) error {
	ms := t.members
	if t.hasOrig {
		ms = t.orig
	}
	mismatch := func(sh *shape) string {
		for i, m := range ms {
			want := m.dwOff
			if m.bits > 0 {
				want = m.dwBit
			}
			if sh.off[i] != want {
				unit := "byte"
				if m.bits > 0 {
					unit = "bit"
				}
				return fmt.Sprintf("member %s at %s %d, DWARF says %d", m.name, unit, sh.off[i], want)
			}
		}
		if sh.size != t.size {
			return fmt.Sprintf("size %d, DWARF says %d", sh.size, t.size)
		}
		return ""
	}
	sh, err := r.place(t, r.src, false)
	if err != nil {
		return err
	}
	why := mismatch(sh)
	if why == "" {
		return nil
	}
	if psh, err := r.place(t, r.src, true); err == nil && mismatch(psh) == "" {
		t.packed = true
		return nil
	}
	return fmt.Errorf("the %s re-layout of %s does not reproduce its DWARF (%s): a rule or a patch is missing", r.src.name, t.path, why)
}

// typeOf finds a named type: a struct's own name wins over a typedef.
func (r *relayout) typeOf(name string) (*ctype, error) {
	off, ok := r.types[name]
	if !ok {
		if off, ok = r.tdefs[name]; !ok {
			return nil, fmt.Errorf("type %s not in DWARF", name)
		}
	}
	return r.typeAt(off, name)
}

func stripT(t *ctype) *ctype {
	for t.kind == kTypedef {
		t = t.elem
	}
	return t
}

// member finds a named member of a struct or union, looking through
// anonymous members: the member, the byte offset of the struct that holds
// it (from t's start) and its offset there (bits for a bit-field).
func (r *relayout) member(t *ctype, name string) (*cmember, int64, int64, error) {
	st := stripT(t)
	if st.kind != kStruct && st.kind != kUnion {
		return nil, 0, 0, errNoMember
	}
	sh, err := r.layout(st, r.dst)
	if err != nil {
		return nil, 0, 0, err
	}
	for i, m := range st.members {
		if m.name == name {
			return m, 0, sh.off[i], nil
		}
	}
	for i, m := range st.members {
		if m.name == "" && m.bits == 0 {
			g, base, off, err := r.member(m.typ, name)
			if err == nil {
				return g, sh.off[i] + base, off, nil
			}
			if !errors.Is(err, errNoMember) {
				return nil, 0, 0, err
			}
		}
	}
	return nil, 0, 0, errNoMember
}

var errNoMember = errors.New("no such member")

// path resolves "type.member.member": the last member, the byte offset of
// the struct holding it and its offset there (bits for a bit-field). After
// "->" the path goes on in the struct the member points at, from its start
// (as layout's DWARF index reads it).
func (r *relayout) path(p string) (*cmember, int64, int64, error) {
	if head, rest, ok := strings.Cut(p, "->"); ok {
		m, _, _, err := r.path(head)
		if err != nil {
			return nil, 0, 0, err
		}
		pt := stripT(m.typ)
		if pt.kind != kPtr || !pt.hasPointee {
			return nil, 0, 0, fmt.Errorf("%s: %s is not a pointer", p, m.name)
		}
		to, err := r.typeAt(pt.pointee, pt.path+"->")
		if err != nil {
			return nil, 0, 0, err
		}
		return r.pathIn(p, to, append([]string{""}, strings.Split(rest, ".")...))
	}
	parts := strings.Split(p, ".")
	t, err := r.typeOf(parts[0])
	if err != nil {
		return nil, 0, 0, err
	}
	return r.pathIn(p, t, parts)
}

// pathIn resolves the members parts[1:] inside t (parts[0] names t).
func (r *relayout) pathIn(p string, t *ctype, parts []string) (*cmember, int64, int64, error) {
	if len(parts) == 1 {
		return nil, 0, 0, fmt.Errorf("%s: not a member path", p)
	}
	var m *cmember
	var base, off int64
	for i, name := range parts[1:] {
		if i > 0 {
			if m.bits > 0 {
				return nil, 0, 0, fmt.Errorf("%s: %s is a bit-field", p, m.name)
			}
			base += off
		}
		g, b, o, err := r.member(t, name)
		if errors.Is(err, errNoMember) {
			return nil, 0, 0, fmt.Errorf("%s: no member %s", p, name)
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", p, err)
		}
		m, t = g, g.typ
		base += b
		off = o
	}
	return m, base, off, nil
}

// Value answers one layout query as layout's DWARF index does, for x86_64.
func (r *relayout) Value(kind, what string) (int64, error) {
	if v, ok := r.answers[kind+":"+what]; ok {
		return v, nil
	}
	switch kind {
	case "enum":
		v, ok := r.enums[what]
		if !ok {
			return 0, fmt.Errorf("enumerator %s not in DWARF", what)
		}
		return v, nil
	case "size":
		t, err := r.typeOf(what)
		if err != nil {
			return 0, err
		}
		s, _, err := r.sizeAlign(stripT(t), r.dst)
		if err != nil {
			return 0, fmt.Errorf("type %s: %w", what, err)
		}
		if s <= 0 {
			return 0, fmt.Errorf("type %s has no size", what)
		}
		return s, nil
	case "off":
		m, base, off, err := r.path(what)
		if err != nil {
			return 0, err
		}
		if m.bits > 0 {
			return 0, fmt.Errorf("%s is a bit-field; use bitoff", what)
		}
		return base + off, nil
	case "bitoff", "bits":
		m, base, off, err := r.path(what)
		if err != nil {
			return 0, err
		}
		if m.bits == 0 {
			return 0, fmt.Errorf("%s is not a bit-field", what)
		}
		if kind == "bits" {
			return m.bits, nil
		}
		return base*8 + off, nil
	case "count":
		m, _, _, err := r.path(what)
		if err != nil {
			return 0, err
		}
		at := stripT(m.typ)
		if at.kind != kArray {
			return 0, fmt.Errorf("%s is not an array", what)
		}
		return at.count, nil
	}
	return 0, fmt.Errorf("unknown layout tag kind %q", kind)
}

// unusedPatches lists the patches that never took effect (a struct nothing
// asked for, or a patch gone stale), for the generator to report.
func (r *relayout) unusedPatches() []string {
	var out []string
	for i, p := range r.patches {
		if !r.used[i] {
			out = append(out, p.String())
		}
	}
	sort.Strings(out)
	return out
}

// show prints a type's members as re-laid out for x86_64, nested structs
// indented, for reviewing patches.
func (r *relayout) show(name string, w func(format string, args ...any)) error {
	t, err := r.typeOf(name)
	if err != nil {
		return err
	}
	return r.showType(stripT(t), 0, "", w)
}

func (r *relayout) showType(t *ctype, base int64, indent string, w func(string, ...any)) error {
	sh, err := r.layout(t, r.dst)
	if err != nil {
		return err
	}
	w("%s%s (size %d, align %d, %s size %d)\n", indent, t.path, sh.size, sh.align, r.src.name, t.size)
	for i, m := range t.members {
		s, _, err := r.sizeAlign(m.typ, r.dst)
		if err != nil {
			return err
		}
		if m.bits > 0 {
			w("%s  bit %d: %s :%d\n", indent, base*8+sh.off[i], m.name, m.bits)
			continue
		}
		w("%s  %d: %s (%s, %d bytes)\n", indent, base+sh.off[i], m.name, typeName(m.typ), s)
		if st := stripT(m.typ); (st.kind == kStruct || st.kind == kUnion) && (st.name == "" || len(indent) < 2) {
			if err := r.showType(st, base+sh.off[i], indent+"    ", w); err != nil {
				return err
			}
		}
	}
	return nil
}

func typeName(t *ctype) string {
	switch t.kind {
	case kPtr:
		return "pointer"
	case kArray:
		return fmt.Sprintf("%s[%d]", typeName(t.elem), t.count)
	}
	if t.name == "" {
		return "anonymous"
	}
	return t.name
}
