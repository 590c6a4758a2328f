package rubyvm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
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

// Synchronisation objects (thread_sync.c): a Mutex, a Queue, a
// ConditionVariable, a Monitor (ext/monitor) and a Thread are typed data.
// Their decoders check what they read: the object's class by name, its
// data typed and out of its slot, an owner that is one of the VM's
// threads and holds the Mutex on its own list. What does not check out
// is not named.

// Classes of the synchronisation objects, as Module#name gives them.
const (
	ClassMutex      = "Thread::Mutex"
	ClassCondVar    = "Thread::ConditionVariable"
	ClassQueue      = "Thread::Queue"
	ClassSizedQueue = "Thread::SizedQueue"
	ClassMonitor    = "Monitor"
	ClassThread     = "Thread"
)

// maxHeldMutexes bounds the walk of a thread's list of held Mutexes.
const maxHeldMutexes = 4096

// syncData returns the class name and data pointer of obj, a typed data
// object of one of the classes named; an error for anything else.
func (v *VM) syncData(obj uint64, classes ...string) (string, uint64, error) {
	L := v.Layout
	typ, _, err := v.objType(obj)
	if err != nil {
		return "", 0, err
	}
	if typ != L.TData {
		return "", 0, fmt.Errorf("object %#x is type %d, not typed data: %w", obj, typ, ErrGarbage)
	}
	klass, err := v.m.u64(at(obj, L.RBasicKlass))
	if err != nil {
		return "", 0, err
	}
	class := v.ClassName(klass)
	if !slices.Contains(classes, class) {
		return "", 0, fmt.Errorf("object %#x is a %q, not a %s: %w", obj, class, strings.Join(classes, " or "), ErrGarbage)
	}
	if L.RTypedDataTypedFlag >= 0 {
		// 1 for typed data out of its slot; embedded data (3.3+'s
		// TYPED_DATA_EMBEDDED) is not what these classes allocate.
		if f, err := v.m.u64(at(obj, L.RTypedDataTypedFlag)); err != nil || f != 1 {
			return "", 0, fmt.Errorf("object %#x is not typed data out of its slot: %w", obj, ErrGarbage)
		}
	}
	data, err := v.m.u64(at(obj, L.RTypedDataData))
	if err != nil {
		return "", 0, err
	}
	if data == 0 {
		return "", 0, fmt.Errorf("object %#x has no data: %w", obj, ErrGarbage)
	}
	return class, data, nil
}

// mutexOwner returns the thread (rb_thread_t) that holds the Mutex whose
// rb_mutex_t is at data, 0 when none does. The owner must be one of
// threads (the VM's, by address) and have the Mutex on its list of held
// ones; an error otherwise.
func (v *VM) mutexOwner(data uint64, threads map[uint64]bool) (uint64, error) {
	L := v.Layout
	var th uint64
	switch {
	case L.MutexFiber >= 0 && L.FiberThreadPtr >= 0:
		fiber, err := v.m.u64(at(data, L.MutexFiber))
		if err != nil || fiber == 0 {
			return 0, v.unheld(data, threads, err)
		}
		if fiber == data {
			// An empty list's head, pointing at itself, read as a Mutex.
			return 0, fmt.Errorf("Mutex %#x's owner is itself: %w", data, ErrGarbage)
		}
		if th, err = v.m.u64(at(fiber, L.FiberThreadPtr)); err != nil {
			return 0, err
		}
	case L.MutexThread >= 0:
		var err error
		if L.MutexECSerial >= 0 {
			serial, err := v.m.u64(at(data, L.MutexECSerial))
			if err != nil || serial == 0 {
				return 0, v.unheld(data, threads, err)
			}
		}
		if th, err = v.m.u64(at(data, L.MutexThread)); err != nil || th == 0 {
			return 0, v.unheld(data, threads, err)
		}
	default:
		return 0, fmt.Errorf("the layout has no Mutex owner: %w", ErrGarbage)
	}
	if !threads[th] {
		return 0, fmt.Errorf("Mutex %#x's owner %#x is none of the VM's threads: %w", data, th, ErrGarbage)
	}
	held, err := v.heldMutexes(th)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(held, data) {
		return 0, fmt.Errorf("Mutex %#x is not on its owner %#x's list: %w", data, th, ErrGarbage)
	}
	return th, nil
}

// unheld checks a Mutex that reads as held by none (err nil): no thread of
// threads has it on its list of held Mutexes. It returns err when not nil.
func (v *VM) unheld(data uint64, threads map[uint64]bool, err error) error {
	if err != nil {
		return err
	}
	for th := range threads {
		if held, _ := v.heldMutexes(th); slices.Contains(held, data) {
			return fmt.Errorf("Mutex %#x reads as held by none, but thread %#x holds it: %w", data, th, ErrGarbage)
		}
	}
	return nil
}

// heldMutexes returns the rb_mutex_t addresses on thread th's list of the
// Mutexes it holds (keeping_mutexes), innermost lock first.
func (v *VM) heldMutexes(th uint64) ([]uint64, error) {
	L := v.Layout
	m, err := v.m.u64(at(th, L.ThreadKeepingMutexes))
	var out []uint64
	for ; err == nil && m != 0; m, err = v.m.u64(at(m, L.MutexNext)) {
		if len(out) == maxHeldMutexes || slices.Contains(out, m) {
			return nil, fmt.Errorf("thread %#x's list of Mutexes does not end: %w", th, ErrGarbage)
		}
		// A Mutex is an object's data of its own, never inside the
		// thread (a list head of the thread's read as one, through a
		// layout that does not fit, was taken for a Mutex it holds).
		if L.ThreadSize > 0 && m >= th && m < th+uint64(L.ThreadSize) {
			return nil, fmt.Errorf("thread %#x's list of Mutexes holds %#x, inside the thread: %w", th, m, ErrGarbage)
		}
		out = append(out, m)
	}
	return out, err
}

// queueState is what a Queue holds: its items, its poppers waiting and,
// of a SizedQueue, its bound and pushers waiting (-1 for a Queue).
type queueState struct {
	length, waiting, max, waitingPush int64
}

// queue reads the Queue (sized: a SizedQueue) whose data is at data.
func (v *VM) queue(data uint64, sized bool) (queueState, error) {
	L := v.Layout
	q := queueState{max: -1, waitingPush: -1}
	if min(L.QueueQue, L.QueueNumWaiting, L.SizedQueueQueue, L.SizedQueueMax, L.SizedQueueNumWaitingPush) < 0 {
		return q, fmt.Errorf("the Ruby %s layout (%s) has no Queue's items and waiters: %w", L.Family, L.Source, layout.ErrFeatureMissing)
	}
	base := data
	if sized {
		base = at(data, L.SizedQueueQueue)
		b, err := v.m.read(data, int(max(L.SizedQueueMax, L.SizedQueueNumWaitingPush)+8))
		if err != nil {
			return q, err
		}
		q.max, q.waitingPush = int64(le64(b, L.SizedQueueMax)), int64(int32(le32(b, L.SizedQueueNumWaitingPush)))
	}
	b, err := v.m.read(base, int(max(L.QueueQue, L.QueueNumWaiting)+8))
	if err != nil {
		return q, err
	}
	q.waiting = int64(int32(le32(b, L.QueueNumWaiting)))
	que := le64(b, L.QueueQue)
	typ, flags, err := v.objType(que)
	if err != nil {
		return q, err
	}
	if typ != L.TArray {
		return q, fmt.Errorf("Queue %#x's items %#x are not an Array: %w", data, que, ErrGarbage)
	}
	slot, err := v.m.read(que, aryHeaderLen(L))
	if err != nil {
		return q, err
	}
	n := AryHeader(L, slot, flags).Length
	if n > 1<<40 || q.waiting < 0 || q.waitingPush < -1 {
		return q, fmt.Errorf("Queue %#x holds %d items, %d waiting: %w", data, n, q.waiting, ErrGarbage)
	}
	q.length = int64(n)
	return q, nil
}
