package ui

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/rawfile"
)

// heapIndex is what the heap views read: the dump's graph and dominator
// tree (kept in an index file, see openHeap), and what is built from them
// in memory each time (a pass or two over the objects): referrers, the
// dominator tree's rows, and the objects grouped by class and type.
type heapIndex struct {
	// key is the state of the dump the index is of.
	key  dumpKey
	g    *heap.Graph
	d    *heap.DomTree
	rev  *heap.Reverse
	kids *heap.Children
	// rootsOf lists the root sets that reference an object directly.
	rootsOf map[uint32][]string

	byClass *groups // by class name and type
	byType  *groups // by type
	// bySite groups by allocation site, class name and type, byGem by the
	// gem of the site (heap.Gem); both nil when the dump has no sites.
	bySite, byGem *groups
	// byGen groups by the GC generation of the allocation (with sites).
	byGen *groups

	// wasteMemo is the Waste view's findings (waste).
	wasteMemo *heapWaste
	// paths keeps the searches from the roots the paths views walk.
	paths *heap.PathSearch
}

// groups partitions the objects: group[i] is object i's group, members
// the objects of each group, rows their totals.
type groups struct {
	group   []uint32 // while the rows are built (nil after)
	start   []uint32 // members of group k: members[start[k]:start[k+1]]
	members []uint32
	rows    []groupRow
	sorted  sync.Map // group -> true once its members are sorted by retained size
	sortMu  sync.Mutex
}

// groupRow is one row of the overview: the objects of a class (or a
// type, an allocation site, a gem), their count and own bytes, and what they retain together (the
// retained size of the set: an object inside another of the same group
// counts once).
type groupRow struct {
	Site string `json:"site,omitempty"`
	Gem  string `json:"gem,omitempty"`
	// Generation is the GC generation the objects were allocated in
	// (GC.count then); nil for those allocated before tracing began.
	Generation    *uint64 `json:"generation,omitempty"`
	Class         string  `json:"class,omitempty"`
	Type          string  `json:"type"`
	Count         uint64  `json:"count"`
	Shallow       uint64  `json:"shallow"`
	Retained      uint64  `json:"retained"`
	RetainedCount uint64  `json:"retained_count"`
}

// indexMagic begins every index file; the dump's identity follows.
const indexMagic = "rbscope heap index\n"

// dumpKey identifies one state of a dump file: an index is reused only
// while the dump has the same device, inode, size and modification time.
type dumpKey struct{ Dev, Ino, Size, Mtime uint64 }

func keyOf(fi os.FileInfo) dumpKey {
	k := dumpKey{Size: uint64(fi.Size()), Mtime: uint64(fi.ModTime().UnixNano())}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.Dev, k.Ino = uint64(st.Dev), st.Ino
	}
	return k
}

// bytes returns the index file's first part: the magic and the key.
func (k dumpKey) bytes() []byte {
	b := []byte(indexMagic)
	for _, v := range []uint64{k.Dev, k.Ino, k.Size, k.Mtime} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// indexPaths returns where the index of the dump at path may be: beside
// the dump (".NAME.rbscope-index"), then in cacheDir under a name made
// from the dump's absolute path.
func indexPaths(path, cacheDir string) []string {
	out := []string{filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".rbscope-index")}
	if abs, err := filepath.Abs(path); err == nil && cacheDir != "" {
		sum := sha256.Sum256([]byte(abs))
		out = append(out, filepath.Join(cacheDir, "heap-index", hex.EncodeToString(sum[:12])+".rbscope-index"))
	}
	return out
}

// openHeap returns the index of the dump at path: read from an index file
// written for this very dump, or built from the dump (parsed, dominators
// computed, rows built) and written for the next time (0600; beside the
// dump, or in cacheDir when the dump's directory is not writable). built
// says which.
func openHeap(path, cacheDir string) (ix *heapIndex, built bool, err error) {
	f, err := heap.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s: not a regular file", path)
	}
	key := keyOf(fi)
	places := indexPaths(path, cacheDir)
	for _, p := range places {
		if ix, err := readIndexFile(p, key); err == nil {
			ix.g.Name, ix.key = path, key
			return ix, false, nil
		}
	}
	if ix, err = buildHeap(f, path); err != nil {
		return nil, false, err
	}
	for _, p := range places {
		if writeIndexFile(p, key, ix) != nil {
			continue
		}
		// Served from the file just written, as it is the next time: the
		// memory that built the index is given back to the system first,
		// so that while the next dump is indexed this one holds only its
		// file's pages (the page cache's, given back under pressure).
		ix = nil
		debug.FreeOSMemory()
		if mapped, err := readIndexFile(p, key); err == nil {
			mapped.g.Name, mapped.key = path, key
			return mapped, true, nil
		}
		// Unreadable at once (the disk failing?): built again, kept in
		// memory.
		if err := f.Rewind(); err != nil {
			return nil, false, err
		}
		if ix, err = buildHeap(f, path); err != nil {
			return nil, false, err
		}
		break
	}
	ix.key = key
	return ix, true, nil
}

// buildHeap builds the index of the dump f: parsed, dominators computed,
// rows built, and its waste being found.
func buildHeap(f *heap.File, path string) (*heapIndex, error) {
	g, err := heap.Load(f, path)
	if err != nil {
		return nil, err
	}
	d := heap.Dominators(g)
	// The waste found beside the rows rather than the dominators
	// (together they took more memory than the dump's size and a half),
	// and kept in the index: opened again, the dump has it at once.
	return newHeapIndex(g, d, startWaste(g)), nil
}

// An index file is a rawfile stream: the magic and the dump's key, the
// graph with its dominator tree, referrers and the tree's rows
// (heap.WriteIndex), then indexHead and each pivot's rows of members
// (groups.start, groups.members). Opened again, the file is mapped into
// memory and its arrays used in place, once checked: the overview
// answers from the rows kept, without a pass over the graph.

// indexHead is the index's part after the graph: the dump's waste and the
// rows of each pivot (byClass, byType, then bySite, byGem and byGen when the
// dump has sites).
type indexHead struct {
	Objects int // the dump's, checked when read back
	Waste   wasteRecord
	Pivots  [][]groupRow
}

// readIndexFile maps the index file p of the dump state key into memory
// and returns the index it holds, its arrays used in place; an error when
// the file is of another dump state, another version, or damaged, or is
// not one rbscope wrote for this user (a regular file of the user's,
// that only the user may read: no one else can cut it under the mapping
// or plant it beside a dump).
func readIndexFile(p string, key dumpKey) (*heapIndex, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.Mode().IsRegular() || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: not an index file of this user's (mode 0600)", p)
	}
	b, err := rawfile.Map(f)
	if err != nil {
		return nil, err
	}
	ix, err := readIndex(rawfile.NewReader(b), key)
	if err != nil {
		rawfile.Unmap(b)
		return nil, err
	}
	return ix, nil
}

// readIndex reads an index of the dump state key from r.
func readIndex(r *rawfile.Reader, key dumpKey) (*heapIndex, error) {
	want := key.bytes()
	head := rawfile.Take[uint8](r, len(want))
	if r.Err() != nil || string(head[:len(indexMagic)]) != indexMagic {
		return nil, errors.New("not an index")
	}
	if string(head) != string(want) {
		return nil, errors.New("index of another state of the dump")
	}
	g, d, rev, kids, err := heap.ReadIndex(r)
	if err != nil {
		return nil, err
	}
	var h indexHead
	r.Gob(&h)
	if r.Err() != nil || h.Objects != g.Len() || !(len(h.Pivots) == 2 || len(h.Pivots) == 5 && g.HasSites()) {
		return nil, errors.New("index without its rows")
	}
	w := wasteOf(h.Waste, g)
	if w == nil {
		return nil, errors.New("index without the waste")
	}
	ix := indexOver(g, d, w)
	ix.rev, ix.kids = rev, kids
	all := make([]*groups, len(h.Pivots))
	for k, rows := range h.Pivots {
		gs := &groups{rows: rows}
		gs.start = rawfile.Take[uint32](r, len(rows)+1)
		gs.members = rawfile.Take[uint32](r, g.Len())
		if r.Err() != nil || !gs.valid(g.Len()) {
			return nil, errors.New("index with damaged rows")
		}
		all[k] = gs
	}
	ix.byClass, ix.byType = all[0], all[1]
	if len(all) == 5 {
		ix.bySite, ix.byGem, ix.byGen = all[2], all[3], all[4]
	}
	return ix, nil
}

// valid tells whether the rows' bounds rise from 0 to n and every member
// is one of n objects.
func (gs *groups) valid(n int) bool {
	if len(gs.start) != len(gs.rows)+1 || gs.start[0] != 0 || int(gs.start[len(gs.rows)]) != n || len(gs.members) != n {
		return false
	}
	for k := range gs.rows {
		if gs.start[k] > gs.start[k+1] {
			return false
		}
	}
	return rawfile.Check(n, func(lo, hi int) string {
		for _, o := range gs.members[lo:hi] {
			if int(o) >= n {
				return "members"
			}
		}
		return ""
	}) == ""
}

// writeIndexFile writes the index to a temporary file (0600) renamed into
// place when complete, creating cacheDir's part (0700) when needed. It
// waits for the waste, which the index keeps.
func writeIndexFile(p string, key dumpKey, ix *heapIndex) error {
	dir := filepath.Dir(p)
	if filepath.Base(dir) == "heap-index" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	tmp, err := os.CreateTemp(dir, ".rbscope-index.tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	bw := bufio.NewWriterSize(tmp, 1<<20)
	w := rawfile.NewWriter(bw)
	rawfile.Put(w, key.bytes())
	err = heap.WriteIndex(w, ix.g, ix.d, ix.rev, ix.kids)
	if err == nil {
		all := ix.pivots()
		h := indexHead{Objects: ix.g.Len(), Waste: ix.waste().record(ix.g), Pivots: make([][]groupRow, len(all))}
		for k, gs := range all {
			h.Pivots[k] = gs.rows
		}
		w.Gob(&h)
		for _, gs := range all {
			rawfile.Put(w, gs.start)
			rawfile.Put(w, gs.members)
		}
		err = w.Err()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	return err
}

// pivots returns the index's groupings in the order its file keeps them.
func (ix *heapIndex) pivots() []*groups {
	all := []*groups{ix.byClass, ix.byType}
	if ix.bySite != nil {
		all = append(all, ix.bySite, ix.byGem, ix.byGen)
	}
	return all
}

// indexOver starts an index over g and d, w their waste: what is made
// the same way whether the rest is built or read from an index file.
func indexOver(g *heap.Graph, d *heap.DomTree, w *heapWaste) *heapIndex {
	ix := &heapIndex{g: g, d: d, rootsOf: map[uint32][]string{}, paths: heap.NewPathSearch(g), wasteMemo: w}
	for _, r := range g.Roots {
		for _, o := range r.Refs {
			if !slices.Contains(ix.rootsOf[o], r.Name) {
				ix.rootsOf[o] = append(ix.rootsOf[o], r.Name)
			}
		}
	}
	return ix
}

// newHeapIndex builds the in-memory rows over g and d; w is g's waste,
// being found.
func newHeapIndex(g *heap.Graph, d *heap.DomTree, w *heapWaste) *heapIndex {
	ix := indexOver(g, d, w)
	// The reverse edges and the dominator tree's children are built beside
	// the groups (each a pass over every object).
	var edges sync.WaitGroup
	edges.Go(func() { ix.rev = heap.NewReverse(g) })
	edges.Go(func() { ix.kids = d.Children() })
	// By class name: every class is the only instance of its own
	// singleton class, and all of them are listed as Class.
	type classKey struct{ class, typ string }
	ix.byClass = makeGroups(g, func(i int) classKey { return classKey{g.ClassName(i), g.Type(i)} }, func(i int) groupRow {
		return groupRow{Class: g.ClassName(i), Type: g.Type(i)}
	})
	ix.byType = makeGroups(g, g.Type, func(i int) groupRow { return groupRow{Type: g.Type(i)} })
	if g.HasSites() {
		siteOf := func(i int) string {
			if s, ok := g.Site(i); ok {
				return s.String()
			}
			return heap.GemUnknown
		}
		type siteKey struct{ site, class, typ string }
		ix.bySite = makeGroups(g, func(i int) siteKey { return siteKey{siteOf(i), g.ClassName(i), g.Type(i)} }, func(i int) groupRow {
			return groupRow{Site: siteOf(i), Class: g.ClassName(i), Type: g.Type(i)}
		})
		gems := map[string]string{} // file -> gem
		gemOf := func(i int) string {
			s, _ := g.Site(i)
			gem, ok := gems[s.File]
			if !ok {
				gem = heap.Gem(s.File)
				gems[s.File] = gem
			}
			return gem
		}
		ix.byGem = makeGroups(g, gemOf, func(i int) groupRow { return groupRow{Gem: gemOf(i)} })
		genOf := func(i int) uint64 {
			if v, ok := g.Generation(i); ok {
				return v
			}
			return math.MaxUint64
		}
		ix.byGen = makeGroups(g, genOf, func(i int) groupRow {
			if v, ok := g.Generation(i); ok {
				return groupRow{Generation: &v}
			}
			return groupRow{}
		})
	}
	edges.Wait()
	all := ix.pivots()
	ix.retainedByGroup(all...)
	for _, gs := range all {
		gs.group = nil // needed only to build the rows
	}
	return ix
}

// makeGroups groups g's objects by key, each group's row started by row.
func makeGroups[K comparable](g *heap.Graph, key func(int) K, row func(int) groupRow) *groups {
	n := g.Len()
	gs := &groups{group: make([]uint32, n)}
	ids := map[K]uint32{}
	var last K
	var lastID uint32
	for i := 0; i < n; i++ {
		k := key(i)
		if i == 0 || k != last {
			id, ok := ids[k]
			if !ok {
				id = uint32(len(gs.rows))
				ids[k] = id
				gs.rows = append(gs.rows, row(i))
			}
			last, lastID = k, id
		}
		gs.group[i] = lastID
		gs.rows[lastID].Count++
		gs.rows[lastID].Shallow += g.Memsize(i)
	}
	gs.start = make([]uint32, len(gs.rows)+1)
	for _, id := range gs.group {
		gs.start[id+1]++
	}
	for k := 1; k < len(gs.start); k++ {
		gs.start[k] += gs.start[k-1]
	}
	gs.members = make([]uint32, n)
	fill := slices.Clone(gs.start[:len(gs.rows)])
	for i, id := range gs.group {
		gs.members[fill[id]] = uint32(i)
		fill[id]++
	}
	return gs
}

// retainedByGroup sums, for each group, what its objects retain together:
// a walk down the dominator tree adds an object's retained size to its
// group unless an object of the same group dominates it (already counted).
func (ix *heapIndex) retainedByGroup(all ...*groups) {
	active := make([][]uint32, len(all))
	for k, gs := range all {
		active[k] = make([]uint32, len(gs.rows))
	}
	type frame struct {
		kids []uint32
		pos  int
		obj  int
	}
	stack := []frame{{kids: ix.kids.Of(-1), obj: -1}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.pos == len(top.kids) {
			if top.obj >= 0 {
				for k, gs := range all {
					active[k][gs.group[top.obj]]--
				}
			}
			stack = stack[:len(stack)-1]
			continue
		}
		o := int(top.kids[top.pos])
		top.pos++
		for k, gs := range all {
			id := gs.group[o]
			if active[k][id] == 0 {
				gs.rows[id].Retained += ix.d.Retained[o]
				gs.rows[id].RetainedCount += uint64(ix.d.RetainedCount[o])
			}
			active[k][id]++
		}
		stack = append(stack, frame{kids: ix.kids.Of(o), obj: o})
	}
}

// membersByRetained returns group id's objects, largest retained size
// first (sorted on first use).
func (ix *heapIndex) membersByRetained(gs *groups, id int) []uint32 {
	m := gs.members[gs.start[id]:gs.start[id+1]]
	if _, ok := gs.sorted.Load(id); ok {
		return m
	}
	gs.sortMu.Lock()
	defer gs.sortMu.Unlock()
	if _, ok := gs.sorted.Load(id); !ok {
		slices.SortStableFunc(m, func(a, b uint32) int { return cmp.Compare(ix.d.Retained[b], ix.d.Retained[a]) })
		gs.sorted.Store(id, true)
	}
	return m
}
