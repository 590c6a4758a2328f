package rubyvm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// maxStringBytes bounds strings read for names and paths: a torn read must
// not make rbscope copy gigabytes.
const maxStringBytes = 16 << 10

// IsHeapObject reports whether a VALUE points at a heap object rather than
// being an immediate (Fixnum, Symbol, Flonum, nil, true, false, undef).
func (v *VM) IsHeapObject(val uint64) bool {
	L := v.Layout
	return val != 0 && val&uint64(L.ImmediateMask) == 0 && val != uint64(L.Qnil) && val != uint64(L.Qfalse)
}

// Fixnum decodes a Fixnum VALUE.
func (v *VM) Fixnum(val uint64) (int64, bool) {
	if val&uint64(v.Layout.FixnumFlag) == 0 {
		return 0, false
	}
	return int64(val) >> 1, true
}

// objType returns the ruby_value_type of a heap object and its flags.
func (v *VM) objType(obj uint64) (typ int64, flags uint64, err error) {
	if !v.IsHeapObject(obj) {
		return 0, 0, fmt.Errorf("VALUE %#x is not a heap object: %w", obj, ErrGarbage)
	}
	flags, err = v.m.u64(at(obj, v.Layout.RBasicFlags))
	if err != nil {
		return 0, 0, err
	}
	return int64(flags) & v.Layout.TMask, flags, nil
}

// rstring reads a Ruby String object.
func (v *VM) rstring(obj uint64) (string, error) {
	if !v.IsHeapObject(obj) {
		return "", fmt.Errorf("VALUE %#x is not a heap object: %w", obj, ErrGarbage)
	}
	slot, err := v.m.read(obj, strHeaderLen(v.Layout))
	if err != nil {
		return "", err
	}
	s, _, err := v.decodeString(obj, slot)
	return s, err
}

// stringLen returns the length of the String obj, from its header (its
// bytes may lie where they cannot be read: a String made of a C literal
// of an image the core lacks).
func (v *VM) stringLen(obj uint64) (uint64, error) {
	L := v.Layout
	typ, flags, err := v.objType(obj)
	if err != nil {
		return 0, err
	}
	if typ != L.TString {
		return 0, fmt.Errorf("object %#x is type %d, not a String: %w", obj, typ, ErrGarbage)
	}
	slot, err := v.m.read(obj, strHeaderLen(L))
	if err != nil {
		return 0, err
	}
	return StrHeader(L, slot, flags).Length, nil
}

// decodeString decodes the String obj from slot, at least the first
// strHeaderLen bytes of its slot, reading what slot lacks of its contents.
// It also returns the bytes that show the String unchanged: its header and,
// embedded, its contents (a String's heap contents are not compared: a
// frozen one's stay put).
func (v *VM) decodeString(obj uint64, slot []byte) (string, []byte, error) {
	L := v.Layout
	hdr := strHeaderLen(L)
	flags := le64(slot, L.RBasicFlags)
	if typ := int64(flags) & L.TMask; typ != L.TString {
		return "", nil, fmt.Errorf("object %#x is type %d, not a String: %w", obj, typ, ErrGarbage)
	}
	h := StrHeader(L, slot[:hdr], flags)
	if h.Length > maxStringBytes {
		return "", nil, fmt.Errorf("String %#x claims %d bytes: %w", obj, h.Length, ErrGarbage)
	}
	if !h.Embedded {
		if h.Length == 0 {
			return "", slot[:hdr], nil
		}
		b, err := v.m.read(h.Ptr, int(h.Length))
		if err != nil {
			return "", nil, err
		}
		return string(b), slot[:hdr], nil
	}
	need := int(h.Off) + int(h.Length)
	if need > len(slot) {
		b, err := v.m.read(obj, need)
		if err != nil {
			return "", nil, err
		}
		slot = b
	}
	key := slot[:max(hdr, need)]
	return string(slot[h.Off:need]), key, nil
}

// nameCache keeps the thread names read, by the String's VALUE, with the
// bytes that showed them (decodeString): a later read of those bytes that
// finds them unchanged is the same name, without following the String.
type nameCache map[uint64]cachedName

type cachedName struct {
	key  []byte
	name string
}

// maxCachedNames bounds the cache; past it, it starts again.
const maxCachedNames = 4096

// readLen is how many bytes at val show its name: those the cache compares,
// or a String's header for one not seen yet.
func (c nameCache) readLen(val uint64, header int) int {
	if e, ok := c[val]; ok {
		return max(len(e.key), header)
	}
	return header
}

// threadName returns the name held by the String val, whose first bytes
// (nameCache.readLen of them) are slot; "" for one that is not a String.
func (v *VM) threadName(val uint64, slot []byte) string {
	if e, ok := v.names[val]; ok && bytes.Equal(e.key, slot[:min(len(slot), len(e.key))]) {
		return e.name
	}
	name, key, err := v.decodeString(val, slot)
	if err != nil {
		return ""
	}
	if len(v.names) >= maxCachedNames {
		clear(v.names)
	}
	v.names[val] = cachedName{key: bytes.Clone(key), name: name}
	return name
}

// rarrayEntry reads element i of a Ruby Array object.
func (v *VM) rarrayEntry(obj uint64, i int64) (uint64, error) {
	L := v.Layout
	typ, flags, err := v.objType(obj)
	if err != nil {
		return 0, err
	}
	if typ != L.TArray {
		return 0, fmt.Errorf("object %#x is type %d, not an Array: %w", obj, typ, ErrGarbage)
	}
	slot, err := v.m.read(obj, aryHeaderLen(L))
	if err != nil {
		return 0, err
	}
	h := AryHeader(L, slot, flags)
	length, ptr := h.Length, h.Ptr
	if h.Embedded {
		ptr = at(obj, h.Off)
	}
	if i < 0 || uint64(i) >= length {
		return 0, fmt.Errorf("index %d outside Array %#x of length %d: %w", i, obj, length, ErrGarbage)
	}
	return v.m.u64(ptr + uint64(i)*8)
}

// IDName returns the name of a Ruby ID (a method or ivar name) through the
// global symbol table.
func (v *VM) IDName(id uint64) (string, error) {
	if s, ok := v.ids[id]; ok {
		return s, nil
	}
	serial := id
	if id > uint64(v.Layout.LastOpID) {
		serial = id >> uint64(v.Layout.IDScopeShift)
	}
	s, err := v.serialName(serial)
	if errors.Is(err, errNoSerial) && id < 0x80 && id > 0x20 {
		return string(rune(id)), nil // a one-character operator
	}
	if err != nil {
		return "", err
	}
	v.ids[id] = s
	return s, nil
}

// errNoSerial is an ID serial the global symbol table does not hold.
var errNoSerial = errors.New("not in the symbol table")

// serialName returns the name of the ID whose serial is given (an ID
// shifted right by its scope bits; what ID tables key by): the String at
// that serial in the global symbol table's ids, an Array of chunks.
func (v *VM) serialName(serial uint64) (string, error) {
	L := v.Layout
	symbols := v.GlobalSymbols()
	if symbols == 0 {
		return "", fmt.Errorf("the global symbol table was not found")
	}
	lastID, err := v.m.u32(at(symbols, L.SymbolsLastID))
	if err != nil {
		return "", err
	}
	if serial == 0 || serial > uint64(lastID) {
		return "", fmt.Errorf("ID serial %d: %w (%w)", serial, errNoSerial, ErrGarbage)
	}
	ids, err := v.m.u64(at(symbols, L.SymbolsIDs))
	if err != nil {
		return "", err
	}
	unit := uint64(L.IDEntryUnit)
	chunk, err := v.rarrayEntry(ids, int64(serial/unit))
	if err != nil {
		return "", err
	}
	str, err := v.rarrayEntry(chunk, int64((serial%unit)*uint64(L.IDEntrySize)+uint64(L.IDEntryStr)))
	if err != nil {
		return "", err
	}
	return v.rstring(str)
}

// ClassExt returns the address of a class's rb_classext_t.
func (v *VM) ClassExt(klass uint64) (uint64, error) {
	L := v.Layout
	if L.RClassExtPtr >= 0 {
		return v.m.u64(at(klass, L.RClassExtPtr))
	}
	return klass + uint64(L.RClassSize), nil
}

// classIvar finds an instance variable of a class by name in its iv_tbl
// (Rubies that keep class ivars in an st_table).
func (v *VM) classIvar(klass uint64, name string) (uint64, bool) {
	L := v.Layout
	if L.ClassExtIVTbl < 0 {
		return 0, false
	}
	ext, err := v.ClassExt(klass)
	if err != nil || ext == 0 {
		return 0, false
	}
	tbl, err := v.m.u64(at(ext, L.ClassExtIVTbl))
	if err != nil || tbl == 0 {
		return 0, false
	}
	head, err := v.m.read(tbl, int(L.StEntries)+8)
	if err != nil {
		return 0, false
	}
	start, bound := le64(head, L.StEntriesStart), le64(head, L.StEntriesBound)
	entries := le64(head, L.StEntries)
	if bound < start || bound-start > 4096 || entries == 0 {
		return 0, false
	}
	n := int(bound - start)
	if n == 0 {
		return 0, false
	}
	raw, err := v.m.read(entries+start*uint64(L.StEntrySize), n*int(L.StEntrySize))
	if err != nil {
		return 0, false
	}
	for i := 0; i < n; i++ {
		e := raw[i*int(L.StEntrySize):]
		if le64(e, L.StEntryHash) == ^uint64(0) { // a deleted entry
			continue
		}
		if k, err := v.IDName(le64(e, L.StEntryKey)); err == nil && k == name {
			return le64(e, L.StEntryRecord), true
		}
	}
	return 0, false
}

// ClassName returns a class or module's name as Ruby's Module#name gives it,
// "#<Class:Foo>" style for singleton classes, or "" when anonymous.
func (v *VM) ClassName(klass uint64) string {
	if s, ok := v.classNames[klass]; ok {
		return s
	}
	name := v.classNameUncached(klass, 0)
	v.classNames[klass] = name
	// An anonymous class may be named later (assigned to a constant).
	if name == "" || v.youngAt(klass) {
		v.noteYoung(cacheClassName, klass, 0)
	}
	return name
}

func (v *VM) classNameUncached(klass uint64, depth int) string {
	L := v.Layout
	typ, flags, err := v.objType(klass)
	if err != nil || depth > 4 {
		return ""
	}
	if typ != L.TClass && typ != L.TModule && typ != L.TIClass {
		return ""
	}
	if flags&uint64(L.FlSingleton) != 0 {
		if att, ok := v.attached(klass); ok {
			return "#<Class:" + v.classNameUncached(att, depth+1) + ">"
		}
		return ""
	}
	return v.classPath(klass)
}

// classPath returns the path a class or module was named by (Module#name:
// a constant's name, which a singleton class assigned to a constant has
// too), or "".
func (v *VM) classPath(klass uint64) string {
	L := v.Layout
	var path uint64
	if L.ClassExtClassPath >= 0 {
		ext, err := v.ClassExt(klass)
		if err != nil {
			return ""
		}
		if path, err = v.m.u64(at(ext, L.ClassExtClassPath)); err != nil {
			return ""
		}
	} else {
		var ok bool
		if path, ok = v.classIvar(klass, "__classpath__"); !ok {
			path, _ = v.classIvar(klass, "__tmp_classpath__")
		}
	}
	if !v.IsHeapObject(path) {
		return ""
	}
	s, err := v.rstring(path)
	if err != nil {
		return ""
	}
	return s
}

// attached returns the object a singleton class belongs to.
func (v *VM) attached(klass uint64) (uint64, bool) {
	L := v.Layout
	if L.ClassExtAttached >= 0 {
		ext, err := v.ClassExt(klass)
		if err != nil {
			return 0, false
		}
		a, err := v.m.u64(at(ext, L.ClassExtAttached))
		return a, err == nil && a != 0
	}
	return v.classIvar(klass, "__attached__")
}

// methodLabel names a method as Ruby 3.4 does (gen_method_name in
// vm_backtrace.c): Class#method, Class.method for a singleton method of a
// class or module with a permanent name (Module#name: a constant's, a
// singleton class's too when it was assigned to one), and the bare name
// when the owner, or the object a singleton owner is attached to, has no
// such name (an anonymous class, a singleton class never assigned to a
// constant, any object that is not a class).
func (v *VM) methodLabel(owner uint64, name string) string {
	L := v.Layout
	_, flags, err := v.objType(owner)
	if err != nil {
		return name
	}
	if flags&uint64(L.FlSingleton) != 0 {
		if att, ok := v.attached(owner); ok {
			if typ, _, err := v.objType(att); err == nil && (typ == L.TClass || typ == L.TModule) {
				if n := v.classPath(att); permanentName(n) {
					return n + "." + name
				}
			}
		}
		return name
	}
	if n := v.classPath(owner); permanentName(n) {
		return n + "#" + name
	}
	return name
}

// permanentName reports whether a class path is a permanent name, not the
// temporary "#<Class:0x...>::Foo" of a constant under an anonymous class.
func permanentName(path string) bool {
	return path != "" && !strings.HasPrefix(path, "#<")
}
