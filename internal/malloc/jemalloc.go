package malloc

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rbscope/rbscope/internal/target"
)

// jemalloc 5 keeps, for every page it hands out, a word in a radix tree
// (the rtree of arena_emap_global) keyed by the page's address: the word's
// top 16 bits are the size class index of the extent the page belongs to,
// its low 48 bits the extent's metadata. On x86_64 (48-bit addresses,
// 4 KiB pages) the tree has two levels of 18 bits each; its root is a
// static array of 2^18 pointers to leaves of 2^18 words, in jemalloc's
// .bss. The tree is not exported, so it is found by where it must be: a
// root array in jemalloc's writable data whose leaves size the probes as
// their size class.
const (
	jeLgVaddr  = 48
	jeLgPage   = 12
	jeLevelBit = 18
	jeFanout   = 1 << jeLevelBit
	// jeMaxData bounds how much of jemalloc's writable data is searched.
	jeMaxData = 16 << 20
)

// jemalloc sizes blocks through the rtree whose root array is at root.
type jemalloc struct {
	r    Reader
	root uint64
}

func (jemalloc) Kind() Kind { return Jemalloc }

// rtreeIndexes returns the root and leaf indexes of addr.
func rtreeIndexes(addr uint64) (i0, i1 uint64) {
	return (addr >> (jeLgPage + jeLevelBit)) & (jeFanout - 1), (addr >> jeLgPage) & (jeFanout - 1)
}

func (j jemalloc) UsableSize(addr uint64) (uint64, bool) {
	if addr == 0 || addr&7 != 0 || addr>>jeLgVaddr != 0 {
		return 0, false
	}
	i0, i1 := rtreeIndexes(addr)
	leaf, ok := word(j.r, j.root+8*i0)
	if !ok || leaf == 0 || leaf&7 != 0 {
		return 0, false
	}
	bits, ok := word(j.r, leaf+8*i1)
	if !ok {
		return 0, false
	}
	return jeSizeOf(bits)
}

// jeSizeOf returns the size class a leaf word records (false for a word
// with no extent).
func jeSizeOf(bits uint64) (uint64, bool) {
	if bits&(1<<jeLgVaddr-1)&^0x7f == 0 { // no extent metadata
		return 0, false
	}
	ind := bits >> jeLgVaddr
	if ind >= uint64(len(jeSizeClasses)) {
		return 0, false
	}
	return jeSizeClasses[ind], true
}

// jeSizeClasses are jemalloc's size classes on x86_64 (a 16-byte quantum,
// 8-byte tiny class, four classes per doubling): index i is size class i.
var jeSizeClasses = func() []uint64 {
	s := []uint64{8}
	for n := uint64(16); n <= 128; n += 16 {
		s = append(s, n)
	}
	for base := uint64(128); base < 1<<62; base *= 2 {
		for k := uint64(1); k <= 4; k++ {
			s = append(s, base+k*base/4)
		}
	}
	return s
}()

// newJemalloc finds the rtree's root in jemalloc's writable data: the
// address from which the first probe's root index leads to a leaf whose
// word gives the probe a size class it fits; the other probes are then
// checked by Identify.
func newJemalloc(r Reader, maps []target.Mapping, probes []Probe) (Allocator, error) {
	if len(probes) == 0 {
		return nil, fmt.Errorf("no block of known size to find jemalloc's radix tree with")
	}
	p := probes[0]
	i0, i1 := rtreeIndexes(p.Addr)
	buf := make([]byte, 1<<20)
	for _, d := range jeData(maps) {
		for base := d.Start; base < d.End; base += uint64(len(buf)) {
			n := min(uint64(len(buf)), d.End-base)
			b := buf[:n]
			if err := target.ReadFull(r, b, base); err != nil {
				break
			}
			for off := uint64(0); off+8 <= n; off += 8 {
				leaf := binary.LittleEndian.Uint64(b[off:])
				if leaf == 0 || leaf&7 != 0 || leaf>>jeLgVaddr != 0 {
					continue
				}
				root := base + off - 8*i0
				if root < d.Start || root+8*jeFanout > d.End {
					continue
				}
				bits, ok := word(r, leaf+8*i1)
				if !ok {
					continue
				}
				if size, ok := jeSizeOf(bits); ok && fits(size, p.Size) {
					return jemalloc{r: r, root: root}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("jemalloc's radix tree was not found in its data (not jemalloc 5 on 48-bit addresses?)")
}

// jeData returns jemalloc's writable data: each writable mapping of a
// libjemalloc, joined with the anonymous mapping (its .bss) that follows
// it, at most jeMaxData each.
func jeData(maps []target.Mapping) []target.Mapping {
	var out []target.Mapping
	for i, m := range maps {
		if !strings.HasPrefix(filepath.Base(m.Path), "libjemalloc") || len(m.Perms) < 2 || m.Perms[1] != 'w' {
			continue
		}
		d := m
		if i+1 < len(maps) && maps[i+1].Start == m.End && maps[i+1].Path == "" && strings.HasPrefix(maps[i+1].Perms, "rw") {
			d.End = maps[i+1].End
		}
		d.End = min(d.End, d.Start+jeMaxData)
		out = append(out, d)
	}
	return out
}
