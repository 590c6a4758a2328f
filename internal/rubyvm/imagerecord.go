package rubyvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/diskcache"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// What a Build learned of a Ruby image (the symbols looked up, the layouts
// chosen, where the globals were found) is kept on disk between runs, in
// the "images" diskcache, one file per build ID: the next rbscope run on
// that Ruby reads neither its symbol tables nor its debug information (a
// debug build's DWARF takes a few hundred milliseconds to read). A record
// is used only when it names the image's build ID and file size and was
// written by this very rbscope executable (a newer one may read layouts
// otherwise); else it is ignored and written anew. RBSCOPE_CACHE=off
// turns it off.

// recordFormat is the version of imageRecord's shape.
const recordFormat = 1

// imageRecord is the file kept for one image.
type imageRecord struct {
	Format  int                       `json:"format"`
	Rbscope string                    `json:"rbscope"` // the executable that wrote it (exeIdentity)
	BuildID string                    `json:"build_id"`
	Size    int64                     `json:"size"`
	Symbols map[string][2]uint64      `json:"symbols"` // link-time address and size
	Missing []string                  `json:"missing"` // symbols the image does not define
	Has     map[string]bool           `json:"has"`
	Layouts map[string]recordedLayout `json:"layouts"` // by Ruby version
	Located map[string]recordedGlobal `json:"located"`
	Skipped []string                  `json:"skipped"` // binary.Image.Skipped
}

// recordedLayout is a layout.Layout in the file: its offsets in the order
// of its fields (the executable that wrote them is this one), which reads
// far faster than an object of some 350 keys.
type recordedLayout struct {
	Family  string           `json:"family"`
	Source  string           `json:"source"`
	Checked string           `json:"checked"`
	Release string           `json:"release"`
	Note    string           `json:"note"` // layoutChoice.note
	Missing []layout.Missing `json:"missing"`
	Values  []int64          `json:"values"`
}

// layoutValues lists the indexes of layout.Layout's int64 fields, or is
// nil when it has a field that recordedLayout does not keep.
var layoutValues = sync.OnceValue(func() []int {
	t := reflect.TypeFor[layout.Layout]()
	var idx []int
	for i := range t.NumField() {
		f := t.Field(i)
		switch {
		case f.Type.Kind() == reflect.Int64:
			idx = append(idx, i)
		case f.Name == "Family" || f.Name == "Source" || f.Name == "Checked" || f.Name == "Release" || f.Name == "Missing":
		default:
			return nil
		}
	}
	return idx
})

// recordLayout turns l into its record; ok is false when it cannot be kept.
func recordLayout(l *layout.Layout) (r recordedLayout, ok bool) {
	idx := layoutValues()
	if idx == nil {
		return r, false
	}
	r = recordedLayout{Family: l.Family, Source: l.Source, Checked: l.Checked, Release: l.Release, Missing: l.Missing, Values: make([]int64, len(idx))}
	v := reflect.ValueOf(l).Elem()
	for i, f := range idx {
		r.Values[i] = v.Field(f).Int()
	}
	return r, true
}

// layout turns a record back into a layout; ok is false when it does not
// fit.
func (r recordedLayout) layout() (*layout.Layout, bool) {
	idx := layoutValues()
	if idx == nil || len(r.Values) != len(idx) {
		return nil, false
	}
	l := &layout.Layout{Family: r.Family, Source: r.Source, Checked: r.Checked, Release: r.Release, Missing: r.Missing}
	v := reflect.ValueOf(l).Elem()
	for i, f := range idx {
		v.Field(f).SetInt(r.Values[i])
	}
	return l, true
}

// recordedGlobal is a locatedHint in the file.
type recordedGlobal struct {
	Addr uint64  `json:"addr"`
	How  FoundBy `json:"how"`
}

// diskRecord is where a Build's record is kept, and what it must match.
type diskRecord struct {
	cache *diskcache.Cache
	id    string // the image's build ID, the file's name
	size  int64  // the image file's size
}

// openDiskRecord returns where the record of the image with build ID id
// and file size size is kept, or nil when the cache is off.
func openDiskRecord(id string, size int64) *diskRecord {
	c := diskcache.Open("images")
	if c == nil || exeIdentity() == "" {
		return nil
	}
	return &diskRecord{cache: c, id: id, size: size}
}

// exeIdentity names the running rbscope executable (its device, inode,
// size and modification time), or is "" when it cannot be read.
var exeIdentity = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d/%d/%d/%d.%09d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
})

// loadRecord fills a new Build from its record on disk, if there is one
// that matches the image and this executable.
func (b *Build) loadRecord() {
	if b.disk == nil {
		return
	}
	data, err := b.disk.cache.Load(b.disk.id)
	if err != nil {
		return
	}
	var r imageRecord
	if json.Unmarshal(data, &r) != nil || r.Format != recordFormat || r.Rbscope != exeIdentity() ||
		r.BuildID != b.disk.id || r.Size != b.disk.size {
		return
	}
	for name, s := range r.Symbols {
		b.syms[name] = buildSymbol{addr: s[0], size: s[1]}
	}
	for _, name := range r.Missing {
		b.syms[name] = buildSymbol{err: fmt.Errorf("%s in %s: %w", name, b.im.Path, binary.ErrNoSymbol)}
	}
	for name, has := range r.Has {
		b.has[name] = has
	}
	for version, rl := range r.Layouts {
		l, ok := rl.layout()
		if fam, err := Family(version); !ok || err != nil || l.Family != fam {
			continue
		}
		if strings.HasPrefix(l.Source, "dwarf:") {
			l.Source = "dwarf:" + b.im.Path // the path as this process names it
		}
		b.layouts[version] = layoutChoice{l: l, recorded: true, note: rl.Note}
	}
	for name, g := range r.Located {
		b.located[name] = locatedHint{g.Addr, g.How}
	}
	b.skipped = r.Skipped
}

// save writes the Build's record, when it learned something since it was
// read or last written.
func (b *Build) save() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.disk == nil || !b.dirty {
		return
	}
	r := imageRecord{Format: recordFormat, Rbscope: exeIdentity(), BuildID: b.disk.id, Size: b.disk.size,
		Symbols: map[string][2]uint64{}, Has: b.has, Layouts: map[string]recordedLayout{}, Located: map[string]recordedGlobal{},
		Skipped: b.skippedLocked()}
	for name, s := range b.syms {
		switch {
		case s.err == nil:
			r.Symbols[name] = [2]uint64{s.addr, s.size}
		case errors.Is(s.err, binary.ErrNoSymbol):
			r.Missing = append(r.Missing, name)
		}
	}
	for version, c := range b.layouts {
		if c.err != nil {
			continue
		}
		if rl, ok := recordLayout(c.l); ok {
			rl.Note = c.note
			r.Layouts[version] = rl
		}
	}
	for name, h := range b.located {
		r.Located[name] = recordedGlobal{h.addr, h.how}
	}
	data, err := json.Marshal(&r)
	if err != nil {
		return
	}
	if b.disk.cache.Store(b.disk.id, data) == nil {
		b.dirty = false
	}
}

// skippedLocked lists what was not read of the image for being over a
// budget: what its record said, and what this run's reading skipped.
func (b *Build) skippedLocked() []string {
	out := append([]string(nil), b.skipped...)
	for _, s := range b.im.Skipped {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
