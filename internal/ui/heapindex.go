package ui

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/rbscope/rbscope/internal/heap"
)

// heapIndex is what the heap views read: the dump's graph and dominator
// tree (kept in an index file, see openHeap), and what is built from them
// in memory each time (a pass or two over the objects): referrers, the
// dominator tree's rows, and the objects grouped by class and type.
type heapIndex struct {
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

	// wasteMemo is the Waste view's findings (waste).
	wasteMemo *heapWaste
	// paths keeps the searches from the roots the paths views walk.
	paths *heap.PathSearch
}

// groups partitions the objects: group[i] is object i's group, members
// the objects of each group, rows their totals.
type groups struct {
	group   []uint32
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
	Site          string `json:"site,omitempty"`
	Gem           string `json:"gem,omitempty"`
	Class         string `json:"class,omitempty"`
	Type          string `json:"type"`
	Count         uint64 `json:"count"`
	Shallow       uint64 `json:"shallow"`
	Retained      uint64 `json:"retained"`
	RetainedCount uint64 `json:"retained_count"`
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
// computed) and written for the next time (0600; beside the dump, or in
// cacheDir when the dump's directory is not writable). built says which.
func openHeap(path, cacheDir string) (ix *heapIndex, built bool, err error) {
	f, err := os.Open(path)
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
		if g, d, w, err := readIndexFile(p, key); err == nil {
			g.Name = path
			if w != nil {
				return newHeapIndex(g, d, w), false, nil
			}
			// An index without the waste (an earlier rbscope's): found
			// once the rows are built, as beside them it took the CPU
			// they need to answer the first view.
			ix := newHeapIndex(g, d, nil)
			ix.wasteMemo = startWaste(g)
			return ix, false, nil
		}
	}
	g, err := heap.Load(f, path)
	if err != nil {
		return nil, false, err
	}
	d := heap.Dominators(g)
	// The waste found beside the index's writing rather than the
	// dominators (together they took more memory than the dump's size and
	// a half), and kept in the index: opened again, the dump has it at
	// once.
	w := startWaste(g)
	for _, p := range places {
		if writeIndexFile(p, key, g, d, w) == nil {
			break
		}
	}
	return newHeapIndex(g, d, w), true, nil
}

// readIndexFile reads the index file p of the dump state key: the graph,
// its dominator tree, and its waste when the index keeps it (nil if not).
func readIndexFile(p string, key dumpKey) (*heap.Graph, *heap.DomTree, *heapWaste, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	head := make([]byte, len(indexMagic))
	if _, err := io.ReadFull(br, head); err != nil || string(head) != indexMagic {
		return nil, nil, nil, errors.New("not an index")
	}
	var k dumpKey
	if err := binary.Read(br, binary.LittleEndian, &k); err != nil {
		return nil, nil, nil, err
	}
	if k != key {
		return nil, nil, nil, errors.New("index of another state of the dump")
	}
	g, d, err := heap.ReadIndex(br)
	if err != nil {
		return nil, nil, nil, err
	}
	return g, d, readWaste(br, g), nil
}

// writeIndexFile writes the index to a temporary file (0600) renamed into
// place when complete, creating cacheDir's part (0700) when needed.
func writeIndexFile(p string, key dumpKey, g *heap.Graph, d *heap.DomTree, w *heapWaste) error {
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
	bw.WriteString(indexMagic)
	binary.Write(bw, binary.LittleEndian, key)
	err = heap.WriteIndex(bw, g, d)
	if err == nil {
		err = writeWaste(bw, g, w)
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

// newHeapIndex builds the in-memory rows over g and d; w is g's waste,
// being found.
func newHeapIndex(g *heap.Graph, d *heap.DomTree, w *heapWaste) *heapIndex {
	ix := &heapIndex{g: g, d: d, rootsOf: map[uint32][]string{}, paths: heap.NewPathSearch(g), wasteMemo: w}
	// The reverse edges and the dominator tree's children are built beside
	// the groups (each a pass over every object).
	var edges sync.WaitGroup
	edges.Go(func() { ix.rev = heap.NewReverse(g) })
	edges.Go(func() { ix.kids = d.Children() })
	for _, r := range g.Roots {
		for _, o := range r.Refs {
			if !slices.Contains(ix.rootsOf[o], r.Name) {
				ix.rootsOf[o] = append(ix.rootsOf[o], r.Name)
			}
		}
	}
	// By class name: every class is the only instance of its own
	// singleton class, and all of them are listed as Class.
	type classKey struct{ class, typ string }
	ix.byClass = makeGroups(g, func(i int) classKey { return classKey{g.ClassName(i), g.Type(i)} }, func(i int) groupRow {
		return groupRow{Class: g.ClassName(i), Type: g.Type(i)}
	})
	ix.byType = makeGroups(g, g.Type, func(i int) groupRow { return groupRow{Type: g.Type(i)} })
	all := []*groups{ix.byClass, ix.byType}
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
		all = append(all, ix.bySite, ix.byGem)
	}
	edges.Wait()
	ix.retainedByGroup(all...)
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
