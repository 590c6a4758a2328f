package main

import (
	"fmt"
	"strconv"
	"strings"
)

// A patch says how an x86_64 build differs from the wasm32 build the
// re-layout reads, where the difference is the preprocessor's (thread
// implementation, SIZEOF_VALUE, USE_FLONUM) and so invisible in DWARF.
type patch struct {
	op     patchOp
	at     string  // struct path ("rb_vm_struct.ractor.sync"), typedef name, or "kind:what"
	member string  // drop, retype: the member; insert: the one to insert after ("" = first)
	fields []field // insert, body: the members; retype, typedef: the type
	value  int64   // answer
	why    string
}

type patchOp int

const (
	opDrop    patchOp = iota // remove a member
	opInsert                 // insert members after one
	opRetype                 // give a member another type
	opBody                   // replace all members of a struct
	opTypedef                // give a typedef another type
	opAnswer                 // answer a layout query outright
	opPack                   // lay a struct out packed (PACKED_STRUCT_UNALIGNED)
)

// field is a member a patch adds. Its type is a spec: ptr; i8, u8, bool,
// i16, u16, int, u32, long, u64, size_t (C's sizes on x86_64);
// blob(SIZE,ALIGN) for an opaque type such as pthread_mutex_t; any struct,
// union or typedef name of the DWARF; {NAME TYPE; NAME TYPE:BITS; ...} for
// an anonymous struct (union{...} for a union); each may end in [N] for an
// array.
type field struct {
	name string
	typ  string
	bits int64
}

func drop(at, member, why string) patch {
	return patch{op: opDrop, at: at, member: member, why: why}
}
func insert(at, after, why string, fs ...field) patch {
	return patch{op: opInsert, at: at, member: after, fields: fs, why: why}
}
func retype(at, member, typ, why string) patch {
	return patch{op: opRetype, at: at, member: member, fields: []field{{typ: typ}}, why: why}
}
func body(at, why string, fs ...field) patch {
	return patch{op: opBody, at: at, fields: fs, why: why}
}
func typedef(name, typ, why string) patch {
	return patch{op: opTypedef, at: name, fields: []field{{typ: typ}}, why: why}
}
func pack(at, why string) patch {
	return patch{op: opPack, at: at, why: why}
}
func answer(kind, what string, v int64, why string) patch {
	return patch{op: opAnswer, at: kind + ":" + what, value: v, why: why}
}

func (p patch) String() string {
	var fs []string
	for _, f := range p.fields {
		s := f.typ
		if f.name != "" {
			s = f.name + " " + s
		}
		if f.bits > 0 {
			s += ":" + strconv.FormatInt(f.bits, 10)
		}
		fs = append(fs, s)
	}
	switch p.op {
	case opDrop:
		return fmt.Sprintf("drop %s.%s", p.at, p.member)
	case opInsert:
		return fmt.Sprintf("insert into %s after %q: %s", p.at, p.member, strings.Join(fs, "; "))
	case opRetype:
		return fmt.Sprintf("retype %s.%s as %s", p.at, p.member, fs[0])
	case opBody:
		return fmt.Sprintf("body of %s: {%s}", p.at, strings.Join(fs, "; "))
	case opTypedef:
		return fmt.Sprintf("typedef %s as %s", p.at, fs[0])
	case opAnswer:
		return fmt.Sprintf("answer %s = %d", p.at, p.value)
	case opPack:
		return fmt.Sprintf("pack %s", p.at)
	}
	return "?"
}

func (r *relayout) typedefPatch(name string) (patch, bool) {
	for i, p := range r.patches {
		if p.op == opTypedef && p.at == name {
			r.used[i] = true
			return p, true
		}
	}
	return patch{}, false
}

// applyMemberPatches applies the patches addressed to struct t's path.
func (r *relayout) applyMemberPatches(t *ctype) error {
	find := func(name string) int {
		for i, m := range t.members {
			if m.name == name {
				return i
			}
		}
		return -1
	}
	for i, p := range r.patches {
		if p.at != t.path || p.op == opTypedef || p.op == opAnswer {
			continue
		}
		var ms []*cmember
		for _, f := range p.fields {
			ft, err := r.spec(f.typ)
			if err != nil {
				return fmt.Errorf("patch %s: %w", p, err)
			}
			ms = append(ms, &cmember{name: f.name, typ: ft, bits: f.bits})
		}
		if !t.hasOrig {
			t.orig, t.hasOrig = t.members, true
			t.members = append([]*cmember(nil), t.members...)
		}
		switch p.op {
		case opPack:
			t.packLP64 = true
		case opBody:
			t.members = ms
			t.decl = false
		case opDrop, opRetype:
			j := find(p.member)
			if j < 0 {
				return fmt.Errorf("patch %s: %s has no member %s", p, t.path, p.member)
			}
			if p.op == opDrop {
				t.members = append(t.members[:j:j], t.members[j+1:]...)
			} else {
				t.members[j] = &cmember{name: p.member, typ: ms[0].typ, bits: t.members[j].bits}
			}
		case opInsert:
			j := 0
			if p.member != "" {
				if j = find(p.member); j < 0 {
					return fmt.Errorf("patch %s: %s has no member %s", p, t.path, p.member)
				}
				j++
			}
			t.members = append(t.members[:j:j], append(ms, t.members[j:]...)...)
		}
		r.used[i] = true
	}
	return nil
}

// spec makes the type a patch names.
func (r *relayout) spec(s string) (*ctype, error) {
	s = strings.TrimSpace(s)
	if open := strings.LastIndexByte(s, '['); open > 0 && strings.HasSuffix(s, "]") {
		n, err := strconv.ParseInt(s[open+1:len(s)-1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad array type %q", s)
		}
		elem, err := r.spec(s[:open])
		if err != nil {
			return nil, err
		}
		return &ctype{kind: kArray, elem: elem, count: n, shapes: map[*abi]*shape{}}, nil
	}
	for _, k := range []string{"{", "union{"} {
		if inner, ok := strings.CutPrefix(s, k); ok && strings.HasSuffix(inner, "}") {
			fs, err := parseFields(strings.TrimSuffix(inner, "}"))
			if err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
			t := &ctype{kind: kStruct, path: s, synthetic: true, shapes: map[*abi]*shape{}}
			if k == "union{" {
				t.kind = kUnion
			}
			for _, f := range fs {
				ft, err := r.spec(f.typ)
				if err != nil {
					return nil, err
				}
				t.members = append(t.members, &cmember{name: f.name, typ: ft, bits: f.bits})
			}
			return t, nil
		}
	}
	blob := func(size, align int64) *ctype {
		return &ctype{kind: kBlob, name: s, size: size, align: align, shapes: map[*abi]*shape{}}
	}
	switch s {
	case "ptr":
		return &ctype{kind: kPtr, name: s}, nil
	case "i8", "u8", "bool":
		return blob(1, 1), nil
	case "i16", "u16":
		return blob(2, 2), nil
	case "int", "u32":
		return blob(4, 4), nil
	case "long", "u64", "size_t", "double":
		return blob(8, 8), nil
	}
	if args, ok := strings.CutPrefix(s, "blob("); ok {
		a, b, ok := strings.Cut(strings.TrimSuffix(args, ")"), ",")
		size, err1 := strconv.ParseInt(a, 10, 64)
		align, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad blob type %q", s)
		}
		return blob(size, align), nil
	}
	return r.typeOf(s)
}

// parseFields reads "NAME TYPE; NAME TYPE:BITS; ..." (TYPE a spec, which
// may hold braces of its own).
func parseFields(s string) ([]field, error) {
	var fs []field
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '{':
				depth++
				continue
			case '}':
				depth--
				continue
			case ';':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		part := strings.TrimSpace(s[start:i])
		start = i + 1
		if part == "" {
			continue
		}
		name, typ, ok := strings.Cut(part, " ")
		if !ok {
			return nil, fmt.Errorf("member %q has no type", part)
		}
		f := field{name: name, typ: strings.TrimSpace(typ)}
		if j := strings.LastIndexByte(f.typ, ':'); j > 0 && !strings.ContainsAny(f.typ[j:], "}]") {
			n, err := strconv.ParseInt(f.typ[j+1:], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("member %q: bad bit width", part)
			}
			f.typ, f.bits = f.typ[:j], n
		}
		fs = append(fs, f)
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced braces in %q", s)
	}
	return fs, nil
}

// members makes the fields of "NAME TYPE; ..." (see field), for insert and
// body patches; it panics on a malformed list, which is a patch list's bug.
func members(s string) []field {
	fs, err := parseFields(s)
	if err != nil {
		panic("layoutgen patch: " + err.Error())
	}
	return fs
}
