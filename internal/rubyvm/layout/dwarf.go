package layout

import (
	"debug/dwarf"
	"fmt"
	"strconv"
	"strings"
)

// Names is what a layout reader needs from a DWARF tree: named types and
// enumerators, each the first complete definition seen.
type Names struct {
	Types map[string]dwarf.Offset // struct/union name -> DIE
	Tdefs map[string]dwarf.Offset // typedef name -> DIE
	Enums map[string]int64        // enumerator name -> value
}

// ReadNames indexes the named types and enumerators of d (the run-time
// reader's and tools/layoutgen's re-layout's one pass over a DWARF tree).
func ReadNames(d *dwarf.Data) (*Names, error) {
	n := &Names{Types: map[string]dwarf.Offset{}, Tdefs: map[string]dwarf.Offset{}, Enums: map[string]int64{}}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("reading DWARF: %w", err)
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			continue // descend into the unit
		case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagTypedef:
			name, _ := e.Val(dwarf.AttrName).(string)
			decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
			m := n.Types
			if e.Tag == dwarf.TagTypedef {
				m = n.Tdefs
			}
			if name != "" && !decl {
				if _, ok := m[name]; !ok {
					m[name] = e.Offset
				}
			}
		case dwarf.TagEnumerationType:
			if e.Children {
				for {
					c, err := r.Next()
					if err != nil {
						return nil, fmt.Errorf("reading DWARF: %w", err)
					}
					if c == nil || c.Tag == 0 {
						break
					}
					if c.Tag != dwarf.TagEnumerator {
						if c.Children {
							r.SkipChildren()
						}
						continue
					}
					name, _ := c.Val(dwarf.AttrName).(string)
					if _, ok := n.Enums[name]; ok || name == "" {
						continue
					}
					switch v := c.Val(dwarf.AttrConstValue).(type) {
					case int64:
						n.Enums[name] = v
					case uint64:
						n.Enums[name] = int64(v)
					}
				}
				continue
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	return n, nil
}

// index answers layout queries from a DWARF tree's names.
type index struct {
	d     *dwarf.Data
	types map[string]dwarf.Offset
	tdefs map[string]dwarf.Offset
	enums map[string]int64
	cache map[dwarf.Offset]dwarf.Type
}

func buildIndex(d *dwarf.Data) (*index, error) {
	n, err := ReadNames(d)
	if err != nil {
		return nil, err
	}
	return &index{d: d, types: n.Types, tdefs: n.Tdefs, enums: n.Enums, cache: map[dwarf.Offset]dwarf.Type{}}, nil
}

func (ix *index) typeOf(name string) (dwarf.Type, error) {
	off, ok := ix.types[name] // a struct's own name wins over a typedef
	if !ok {
		if off, ok = ix.tdefs[name]; !ok {
			return nil, fmt.Errorf("type %s not in DWARF", name)
		}
	}
	if t, ok := ix.cache[off]; ok {
		return t, nil
	}
	t, err := ix.d.Type(off)
	if err != nil {
		return nil, fmt.Errorf("type %s: %w", name, err)
	}
	ix.cache[off] = t
	return t, nil
}

// StripType looks through typedefs and qualifiers (const, volatile) to
// the type they name.
func StripType(t dwarf.Type) dwarf.Type {
	for {
		switch tt := t.(type) {
		case *dwarf.TypedefType:
			t = tt.Type
		case *dwarf.QualType:
			t = tt.Type
		default:
			return t
		}
	}
}

// member finds a named member, looking through anonymous struct/union
// members, and returns its field and byte offset from the struct start.
func member(t dwarf.Type, name string) (*dwarf.StructField, int64, bool) {
	st, ok := StripType(t).(*dwarf.StructType)
	if !ok {
		return nil, 0, false
	}
	for _, f := range st.Field {
		if f.Name == name {
			return f, f.ByteOffset, true
		}
	}
	for _, f := range st.Field {
		if f.Name == "" {
			if g, off, ok := member(f.Type, name); ok {
				return g, f.ByteOffset + off, true
			}
		}
	}
	return nil, 0, false
}

// path resolves "type.member.member" to the last field and its offset. A
// "->" goes on in the struct the member before it points at, and the
// offset starts again from that struct.
func (ix *index) path(p string) (*dwarf.StructField, int64, error) {
	hops := strings.Split(p, "->")
	parts := strings.Split(hops[0], ".")
	t, err := ix.typeOf(parts[0])
	if err != nil {
		return nil, 0, err
	}
	var f *dwarf.StructField
	var total int64
	for i, hop := range hops {
		if i > 0 {
			pt, ok := StripType(t).(*dwarf.PtrType)
			if !ok {
				return nil, 0, fmt.Errorf("%s: %s is not a pointer", p, f.Name)
			}
			t, total, parts = pt.Type, 0, append([]string{""}, strings.Split(hop, ".")...)
		}
		for _, m := range parts[1:] {
			g, off, ok := member(t, m)
			if !ok {
				return nil, 0, fmt.Errorf("%s: no member %s", p, m)
			}
			f, t = g, g.Type
			total += off
		}
	}
	if f == nil {
		return nil, 0, fmt.Errorf("%s: not a member path", p)
	}
	return f, total, nil
}

func (ix *index) value(kind, what string) (int64, error) {
	switch kind {
	case "enum":
		v, ok := ix.enums[what]
		if !ok {
			return 0, fmt.Errorf("enumerator %s not in DWARF", what)
		}
		return v, nil
	case "size":
		t, err := ix.typeOf(what)
		if err != nil {
			return 0, err
		}
		if sz := StripType(t).Size(); sz > 0 {
			return sz, nil
		}
		return 0, fmt.Errorf("type %s has no size", what)
	case "off":
		f, off, err := ix.path(what)
		if err != nil {
			return 0, err
		}
		if f.BitSize != 0 {
			return 0, fmt.Errorf("%s is a bit-field; use bitoff", what)
		}
		return off, nil
	case "bitoff", "bits":
		f, off, err := ix.path(what)
		if err != nil {
			return 0, err
		}
		if f.BitSize == 0 {
			return 0, fmt.Errorf("%s is not a bit-field", what)
		}
		if kind == "bits" {
			return f.BitSize, nil
		}
		bit := f.DataBitOffset
		if bit == 0 && f.BitOffset != 0 {
			// DWARF 2/3 style: offset from the most significant bit.
			bit = (f.ByteSize*8 - f.BitOffset - f.BitSize) + f.ByteOffset*8
			return bit + (off-f.ByteOffset)*8, nil
		}
		return bit + (off-f.ByteOffset)*8, nil
	case "count":
		f, _, err := ix.path(what)
		if err != nil {
			return 0, err
		}
		at, ok := StripType(f.Type).(*dwarf.ArrayType)
		if !ok {
			return 0, fmt.Errorf("%s is not an array", what)
		}
		return at.Count, nil
	}
	return 0, fmt.Errorf("unknown layout tag kind %q", kind)
}

// macroValue reads a macro tag, "N" or "N,FAMILY=M,...", for family.
func macroValue(tag, family string) (int64, error) {
	def, overrides, _ := strings.Cut(tag, ",")
	val := def
	if overrides != "" {
		for _, o := range strings.Split(overrides, ",") {
			f, m, ok := strings.Cut(o, "=")
			if !ok {
				return 0, fmt.Errorf("bad macro tag %q", tag)
			}
			if f == family {
				val = m
			}
		}
	}
	n, err := strconv.ParseInt(val, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("bad macro tag %q: %w", tag, err)
	}
	return n, nil
}

// FromDWARF reads a Layout from the debug information of a Ruby build.
func FromDWARF(d *dwarf.Data, family, source string) (*Layout, error) {
	ix, err := buildIndex(d)
	if err != nil {
		return nil, err
	}
	return Build(ix, family, source)
}

// Value answers one layout query from the DWARF index (see Resolver).
func (ix *index) Value(kind, what string) (int64, error) { return ix.value(kind, what) }
