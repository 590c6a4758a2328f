package wire

import "github.com/rbscope/rbscope/internal/alloctrace"

// Alloc is the document `rbscope alloc --json` prints: the allocation
// sites of the objects made during the window and still alive at its end,
// grouped as --by says, largest first.
type Alloc struct {
	Sites []AllocSite `json:"sites"`
}

// AllocSite is the live objects of one group: the keys --by groups on are
// set (file; file and line; class; or all three), the others left out.
type AllocSite struct {
	File  string `json:"file,omitempty"`
	Line  int    `json:"line,omitempty"`
	Class string `json:"class,omitempty"`
	Count uint64 `json:"count"`
	// Bytes is ObjectSpace.memsize_of summed.
	Bytes uint64 `json:"bytes"`
}

// NewAlloc maps grouped sites (never nil: no site is []).
func NewAlloc(sites []alloctrace.Site) *Alloc {
	out := &Alloc{Sites: make([]AllocSite, len(sites))}
	for i, s := range sites {
		out.Sites[i] = AllocSite{File: s.File, Line: s.Line, Class: s.Class, Count: s.Count, Bytes: s.Bytes}
	}
	return out
}
