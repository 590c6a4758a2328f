package rubyvm

import (
	"time"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// What the VM learns of objects in the target (an iseq's location and
// lines, the label of a frame, a method entry's owner or name, a class's
// name) is kept by the objects' addresses, and holds while the objects
// stand where they were. Only the garbage collector frees or moves them,
// and the collector counts its runs (objspace->profile): an old object is
// freed or moved only by a major collection, a young one by any. So a
// read of the threads also reads the two counts, and then
//
//   - a major collection since the last read empties every cache of objects;
//   - a minor one drops the entries that rest on a young object (cacheGen
//     lists them as they are made);
//   - otherwise everything is kept, for as long as the process runs, up to
//     maxCachedEntries.
//
// A Ruby whose layout lacks the counts (or whose objspace cannot be read)
// has its caches of objects emptied every cacheLifetime instead. A core's
// are kept: its memory does not change.

// cacheLifetime is how long what was learned of objects is kept when the
// collector's counts cannot be read.
const cacheLifetime = 5 * time.Second

// maxCachedEntries bounds the entries of the caches of objects and names
// together (a long-running sampler of a large application, an agent with
// one VM per process: some 5 MB each at most): past it, they are emptied.
const maxCachedEntries = 50_000

// maxGCCountsBytes bounds the span of the collector's two counts.
const maxGCCountsBytes = 256

// cacheKind names one cache of objects.
type cacheKind uint8

const (
	cacheIseq      cacheKind = iota // VM.iseqs
	cacheLine                       // VM.lines
	cacheLabel                      // VM.labels
	cacheOwner                      // VM.owners
	cacheCFunc                      // VM.cfuncs
	cacheClassName                  // VM.classNames
)

// youngEntry is an entry that rests on a young object: the next
// collection of any kind may free the object.
type youngEntry struct {
	kind cacheKind
	key  [2]uint64
}

// cacheGen is what the caches of objects were learned under.
type cacheGen struct {
	// count and major are the collector's counts at the last read; read
	// is false until one (the caches are emptied at the first).
	count, major uint64
	read         bool
	// young lists the entries made since the last collection that rest
	// on a young object.
	young []youngEntry
	// emptied is when the caches were last emptied.
	emptied time.Time
}

// forgetObjects empties the caches of objects.
func (c *memoCaches) forgetObjects() {
	c.classNames = map[uint64]string{}
	c.iseqs = map[uint64]*iseqInfo{}
	c.lines = map[[2]uint64]int{}
	c.labels = map[[2]uint64]string{}
	c.owners = map[uint64]uint64{}
	c.cfuncs = map[uint64]string{}
	c.gen.young = c.gen.young[:0]
	c.gen.emptied = time.Now()
}

// cachedEntries is how many entries the caches of objects and names hold.
func (c *memoCaches) cachedEntries() int {
	return len(c.ids) + len(c.classNames) + len(c.iseqs) + len(c.lines) + len(c.labels) + len(c.owners) + len(c.cfuncs)
}

// gcCounts returns where the collector's counts lie in the target (one
// range that holds both), for a read of the threads to read with its own.
func (v *VM) gcCounts() (addr uint64, n int, ok bool) {
	L := v.Layout
	if L.ObjspaceGCCount <= 0 || L.ObjspaceMajorGCCount <= 0 {
		return 0, 0, false
	}
	lo, hi := min(L.ObjspaceGCCount, L.ObjspaceMajorGCCount), max(L.ObjspaceGCCount, L.ObjspaceMajorGCCount)+8
	if hi-lo > maxGCCountsBytes {
		return 0, 0, false
	}
	base, err := v.objspaceBase()
	if err != nil {
		return 0, 0, false
	}
	return base + uint64(lo), int(hi - lo), true
}

// checkCaches keeps, drops or empties the caches of objects by the
// collector's counts as read (b, from the range gcCounts names, where L
// places them; ok false when they could not be read).
func (c *memoCaches) checkCaches(L *layout.Layout, b []byte, ok bool) {
	g := &c.gen
	if c.cachedEntries() > maxCachedEntries {
		c.ids = map[uint64]string{}
		c.forgetObjects()
		g.read = false
	}
	var count, major uint64
	if ok {
		lo := min(L.ObjspaceGCCount, L.ObjspaceMajorGCCount)
		count, major = le64(b, L.ObjspaceGCCount-lo), le64(b, L.ObjspaceMajorGCCount-lo)
		// Counts that go back are not the counts (a layout off for this
		// build): as if unread.
		ok = major <= count && !(g.read && count < g.count)
	}
	if !ok {
		if time.Since(g.emptied) > cacheLifetime {
			c.forgetObjects()
		}
		g.read = false
		return
	}
	switch {
	case !g.read || major != g.major:
		c.forgetObjects()
	case count != g.count:
		c.dropYoung()
	}
	g.count, g.major, g.read = count, major, true
}

// dropYoung drops the entries that rest on a young object.
func (c *memoCaches) dropYoung() {
	for _, e := range c.gen.young {
		switch e.kind {
		case cacheIseq:
			delete(c.iseqs, e.key[0])
		case cacheLine:
			delete(c.lines, e.key)
		case cacheLabel:
			delete(c.labels, e.key)
		case cacheOwner:
			delete(c.owners, e.key[0])
		case cacheCFunc:
			delete(c.cfuncs, e.key[0])
		case cacheClassName:
			delete(c.classNames, e.key[0])
		}
	}
	c.gen.young = c.gen.young[:0]
}

// noteYoung records an entry just made that rests on a young object (of
// a live process: a core's entries are never dropped).
func (v *VM) noteYoung(kind cacheKind, k0, k1 uint64) {
	if v.live {
		v.gen.young = append(v.gen.young, youngEntry{kind: kind, key: [2]uint64{k0, k1}})
	}
}

// young says whether the object with these flags is young (the next
// collection may free it); every object is, on a layout that does not
// say.
func young(L *layout.Layout, flags uint64) bool {
	return L.FlPromoted <= 0 || flags&uint64(L.FlPromoted) != uint64(L.FlPromoted)
}

// youngAt says whether the object at addr is young; an object that
// cannot be read is. In a core nothing is (no collection will run), and
// nothing is read to say so.
func (v *VM) youngAt(addr uint64) bool {
	if !v.live || addr == 0 || !v.IsHeapObject(addr) {
		return false // not an object: nothing the collector frees
	}
	_, flags, err := v.objType(addr)
	return err != nil || young(v.Layout, flags)
}

// ownerYoung says whether what a label takes from a method's owner may
// change at the next collection: the owner is young, or anonymous (a
// class may be named later, by a constant).
func (v *VM) ownerYoung(owner uint64) bool {
	return owner != 0 && (v.youngAt(owner) || v.ClassName(owner) == "")
}
