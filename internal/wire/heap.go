package wire

import (
	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/rubyvm"
)

// HeapCensus is the document `rbscope heap census --json` prints: the live
// objects by type and class.
type HeapCensus struct {
	Classes []CensusRow `json:"classes"`
}

// NewHeapCensus maps a census's rows by class.
func NewHeapCensus(c *rubyvm.Census) *HeapCensus {
	return &HeapCensus{Classes: NewCensusRows(c.ByClass)}
}

// HeapDiff is the document `rbscope heap diff --json` prints: what is new
// in the AFTER dump against the BEFORE one.
type HeapDiff struct {
	Before DumpInfo `json:"before"`
	After  DumpInfo `json:"after"`
	// Later is the third dump (heap diff A B C), whose objects new in
	// AFTER that it still holds are the rows and KeptObjects.
	Later       *DumpInfo `json:"later,omitempty"`
	NewObjects  uint64    `json:"new_objects"`
	NewBytes    uint64    `json:"new_bytes"`
	GoneObjects uint64    `json:"gone_objects"`
	GoneBytes   uint64    `json:"gone_bytes"`
	KeptObjects *uint64   `json:"kept_objects,omitempty"`
	KeptBytes   *uint64   `json:"kept_bytes,omitempty"`
	// By is how the rows group the new objects: "class" or "site".
	By   string    `json:"by"`
	Rows []DiffRow `json:"rows"`
	// More counts the rows left out by --top.
	More int `json:"more_rows"`
}

// DumpInfo names a heap dump file and its size.
type DumpInfo struct {
	File    string `json:"file"`
	Objects int    `json:"objects"`
	Bytes   uint64 `json:"bytes"`
}

// DiffRow is a group of new objects: their class and type, and with --by
// site their allocation site.
type DiffRow struct {
	Class string `json:"class"`
	Type  string `json:"type"`
	Site  string `json:"site,omitempty"`
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// NewDumpInfo describes dump g read from file.
func NewDumpInfo(file string, g *heap.Graph) DumpInfo {
	return DumpInfo{File: file, Objects: g.Len(), Bytes: g.Bytes}
}

// NewHeapDiff maps a diff of before and after whose rows, grouped by by,
// were cut to rows with more left out.
func NewHeapDiff(before, after DumpInfo, d *heap.DiffResult, by string, rows []heap.DiffRow, more int) *HeapDiff {
	return &HeapDiff{Before: before, After: after, NewObjects: d.NewObjects, NewBytes: d.NewBytes,
		GoneObjects: d.GoneObjects, GoneBytes: d.GoneBytes, By: by, Rows: NewDiffRows(rows), More: more}
}

// NewHeapDiff3 maps a diff of three dumps (heap.Diff3).
func NewHeapDiff3(before, after, later DumpInfo, d *heap.DiffResult, by string, rows []heap.DiffRow, more int) *HeapDiff {
	out := NewHeapDiff(before, after, d, by, rows, more)
	kept, bytes := d.KeptObjects, d.KeptBytes
	out.Later, out.KeptObjects, out.KeptBytes = &later, &kept, &bytes
	return out
}

// newDiffRows maps rows of new objects.
func NewDiffRows(rows []heap.DiffRow) []DiffRow {
	out := make([]DiffRow, len(rows))
	for i, r := range rows {
		out[i] = DiffRow{Class: r.Class, Type: r.Type, Site: r.Site, Count: r.Count, Bytes: r.Bytes}
	}
	return out
}

// HeapObject is one object of a heap dump.
type HeapObject struct {
	Address string `json:"address"`
	Type    string `json:"type"`
	Class   string `json:"class"`
	Desc    string `json:"desc"`
	Memsize uint64 `json:"memsize"`
	// Conservative says the previous object of a path holds this one only
	// through a word a conservative scan found.
	Conservative bool `json:"conservative,omitempty"`
}

// NewHeapObject maps object h of dump g.
func NewHeapObject(g *heap.Graph, h heap.Hop) HeapObject {
	return HeapObject{Address: hex(h.Address), Type: h.Type, Class: h.Class, Desc: h.Desc, Memsize: g.Memsize(h.Index),
		Conservative: h.Conservative}
}

// HeapPath is the document `rbscope heap path --json` prints: an object,
// the objects that hold it, and the shortest paths from the roots to it.
type HeapPath struct {
	HeapObject
	Holders []string `json:"holders"`
	// Ignored are the objects the paths avoid (--ignore).
	Ignored []string   `json:"ignored,omitempty"`
	Paths   []RootPath `json:"paths"`
}

// RootPath is a chain from a root to the object: Root references
// Hops[0], which references Hops[1], ...; the last hop is the object.
type RootPath struct {
	Root string       `json:"root"`
	Hops []HeapObject `json:"hops"`
}

// NewHeapPath maps object target of dump g, its holders and its paths,
// which avoid the objects ignored.
func NewHeapPath(g *heap.Graph, target int, holders []int, paths []heap.Path, ignored []int) *HeapPath {
	out := &HeapPath{HeapObject: NewHeapObject(g, g.Hop(target)), Holders: make([]string, len(holders)), Paths: make([]RootPath, len(paths))}
	for _, i := range ignored {
		out.Ignored = append(out.Ignored, hex(g.Address(i)))
	}
	for i, h := range holders {
		out.Holders[i] = hex(g.Address(h))
	}
	for i, p := range paths {
		out.Paths[i] = newRootPath(g, p)
	}
	return out
}

// newRootPath maps a path of dump g.
func newRootPath(g *heap.Graph, p heap.Path) RootPath {
	rp := RootPath{Root: p.Root}
	for _, h := range p.Hops {
		rp.Hops = append(rp.Hops, NewHeapObject(g, h))
	}
	return rp
}

// HeapTop is the document `rbscope heap top --json` prints: the objects
// of a dump that retain the most bytes.
type HeapTop struct {
	DumpInfo
	Reachable      int        `json:"reachable"`
	ReachableBytes uint64     `json:"reachable_bytes"`
	Retainers      []Retainer `json:"retainers"`
}

// Retainer is an object and what it retains: the objects reachable only
// through it, itself included.
type Retainer struct {
	HeapObject
	Retained uint64 `json:"retained"`
	Count    uint64 `json:"count"`
	// Dominator is the address of the object that in turn retains this
	// one, or "root".
	Dominator string `json:"dominator"`
}

// NewHeapTop maps the retainers rs of dump g read from file.
func NewHeapTop(file string, g *heap.Graph, d *heap.DomTree, rs []heap.Retainer) *HeapTop {
	out := &HeapTop{DumpInfo: NewDumpInfo(file, g), Reachable: d.Reachable, ReachableBytes: d.ReachableBytes,
		Retainers: make([]Retainer, len(rs))}
	for i, r := range rs {
		out.Retainers[i] = Retainer{HeapObject: NewHeapObject(g, r.Hop), Retained: r.Retained, Count: r.Count,
			Dominator: Dominator(g, r)}
	}
	return out
}

// Dominator names the object that retains r: its address, or "root".
func Dominator(g *heap.Graph, r heap.Retainer) string {
	if r.Idom < 0 {
		return "root"
	}
	return hex(g.Address(r.Idom))
}

// HeapSuspects is the document `rbscope heap suspects --json` prints: where
// the AFTER dump grew against the BEFORE one, by the object both hold that
// keeps the new objects, largest first.
type HeapSuspects struct {
	Before DumpInfo `json:"before"`
	After  DumpInfo `json:"after"`
	// Later is the third dump (heap suspects A B C): the objects charged
	// are those new in AFTER that it still holds, KeptObjects of them.
	Later       *DumpInfo `json:"later,omitempty"`
	NewObjects  uint64    `json:"new_objects"`
	NewBytes    uint64    `json:"new_bytes"`
	KeptObjects *uint64   `json:"kept_objects,omitempty"`
	KeptBytes   *uint64   `json:"kept_bytes,omitempty"`
	Suspects    []Suspect `json:"suspects"`
}

// Suspect is one holder of new objects: an object of both dumps (null
// when the root sets hold the new objects directly), what it retains in
// AFTER, the new objects it keeps by class and by allocation site (when
// the dump has sites), and its shortest path from the roots.
type Suspect struct {
	Holder     *HeapObject `json:"holder"`
	Retained   uint64      `json:"retained"`
	NewObjects uint64      `json:"new_objects"`
	NewBytes   uint64      `json:"new_bytes"`
	Classes    []DiffRow   `json:"classes"`
	Sites      []DiffRow   `json:"sites,omitempty"`
	Path       *RootPath   `json:"path"`
}

// NewHeapSuspects3 maps the suspects of three dumps, found in later (g).
func NewHeapSuspects3(before, after, later DumpInfo, g *heap.Graph, d *heap.DiffResult, suspects []heap.Suspect) *HeapSuspects {
	out := NewHeapSuspects(before, after, g, d, suspects)
	kept, bytes := d.KeptObjects, d.KeptBytes
	out.Later, out.KeptObjects, out.KeptBytes = &later, &kept, &bytes
	return out
}

// NewHeapSuspects maps the suspects of after (g) against before.
func NewHeapSuspects(before, after DumpInfo, g *heap.Graph, d *heap.DiffResult, suspects []heap.Suspect) *HeapSuspects {
	out := &HeapSuspects{Before: before, After: after, NewObjects: d.NewObjects, NewBytes: d.NewBytes, Suspects: make([]Suspect, len(suspects))}
	for i, s := range suspects {
		ws := Suspect{Retained: s.Retained, NewObjects: s.NewObjects, NewBytes: s.NewBytes, Classes: NewDiffRows(s.Classes)}
		if len(s.Sites) > 0 {
			ws.Sites = NewDiffRows(s.Sites)
		}
		if !s.FromRoots {
			h := NewHeapObject(g, s.Holder)
			ws.Holder = &h
		}
		if s.Path != nil {
			rp := newRootPath(g, *s.Path)
			ws.Path = &rp
		}
		out.Suspects[i] = ws
	}
	return out
}
