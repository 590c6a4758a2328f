package layout

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// index is what the extractor needs from a DWARF tree: named types and
// enumerators, each the first complete definition seen.
type index struct {
	d     *dwarf.Data
	types map[string]dwarf.Offset // struct/union name -> DIE
	tdefs map[string]dwarf.Offset // typedef name -> DIE
	enums map[string]int64        // enumerator name -> value
	cache map[dwarf.Offset]dwarf.Type
}

func buildIndex(d *dwarf.Data) (*index, error) {
	ix := &index{d: d, types: map[string]dwarf.Offset{}, tdefs: map[string]dwarf.Offset{}, enums: map[string]int64{}, cache: map[dwarf.Offset]dwarf.Type{}}
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
			m := ix.types
			if e.Tag == dwarf.TagTypedef {
				m = ix.tdefs
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
					if _, ok := ix.enums[name]; ok || name == "" {
						continue
					}
					switch v := c.Val(dwarf.AttrConstValue).(type) {
					case int64:
						ix.enums[name] = v
					case uint64:
						ix.enums[name] = int64(v)
					}
				}
				continue
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	return ix, nil
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

func strip(t dwarf.Type) dwarf.Type {
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
	st, ok := strip(t).(*dwarf.StructType)
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

// path resolves "type.member.member" to the last field and its offset.
func (ix *index) path(p string) (*dwarf.StructField, int64, error) {
	parts := strings.Split(p, ".")
	t, err := ix.typeOf(parts[0])
	if err != nil {
		return nil, 0, err
	}
	var f *dwarf.StructField
	var total int64
	for _, m := range parts[1:] {
		g, off, ok := member(t, m)
		if !ok {
			return nil, 0, fmt.Errorf("%s: no member %s", p, m)
		}
		f, t = g, g.Type
		total += off
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
		if sz := strip(t).Size(); sz > 0 {
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
		at, ok := strip(f.Type).(*dwarf.ArrayType)
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

// FromDWARF reads a Layout from the debug information of a Ruby build. It
// fails naming every required field it could not find.
func FromDWARF(d *dwarf.Data, family, source string) (*Layout, error) {
	ix, err := buildIndex(d)
	if err != nil {
		return nil, err
	}
	l := &Layout{Family: family, Source: source}
	var missing []error
	v := reflect.ValueOf(l).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if m, ok := sf.Tag.Lookup("macro"); ok {
			n, err := macroValue(m, family)
			if err != nil {
				return nil, fmt.Errorf("layout field %s: %w", sf.Name, err)
			}
			v.Field(i).SetInt(n)
			continue
		}
		tag, ok := sf.Tag.Lookup("dwarf")
		if !ok {
			continue
		}
		spec, optional := strings.CutSuffix(tag, ",optional")
		kind, whats, _ := strings.Cut(spec, ":")
		var val int64
		var errs []error
		found := false
		for _, what := range strings.Split(whats, "|") {
			x, err := ix.value(kind, what)
			if err == nil {
				val, found = x, true
				break
			}
			errs = append(errs, err)
		}
		switch {
		case found:
			v.Field(i).SetInt(val)
		case optional:
			v.Field(i).SetInt(-1)
		default:
			missing = append(missing, fmt.Errorf("%s: %w", sf.Name, errors.Join(errs...)))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("DWARF lacks what rbscope needs: %w", errors.Join(missing...))
	}
	return l, nil
}
