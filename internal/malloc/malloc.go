// Package malloc identifies the memory allocator a process runs with and
// tells the usable size of a block that allocator returned, read from the
// allocator's own metadata in the process's memory.
//
// Nothing here trusts a guess: an allocator is named from the process's
// mappings, and its metadata is used only after it sized blocks whose
// sizes the caller knows (probes: structs the Ruby VM allocated, whose
// sizes its layout gives) as that allocator would have. A process whose
// allocator is not recognised, or whose metadata does not agree with the
// probes, gets an Allocator that sizes nothing.
package malloc

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/rbscope/rbscope/internal/libc"
	"github.com/rbscope/rbscope/internal/target"
)

// Kind names an allocator.
type Kind string

// The allocators rbscope knows.
const (
	Unknown  Kind = "unknown"
	Glibc    Kind = "glibc"         // glibc's ptmalloc: a size word before each chunk
	Jemalloc Kind = "jemalloc"      // jemalloc 5: size classes in a radix tree
	Mallocng Kind = "musl-mallocng" // musl 1.2.1+: slots in groups with out-of-band metadata
)

// Reader reads the process's memory.
type Reader interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Allocator sizes the blocks one allocator returned.
type Allocator interface {
	// Kind says which allocator this is.
	Kind() Kind
	// UsableSize returns how many bytes the block that starts at addr
	// may hold, as the allocator's metadata records it; ok is false when
	// that metadata does not vouch for a block starting there.
	UsableSize(addr uint64) (n uint64, ok bool)
}

// Probe is a block the caller knows the allocator returned, and the
// least it must hold (the size of the struct stored in it).
type Probe struct {
	Addr uint64
	Size uint64
}

// Identified is the result of Identify.
type Identified struct {
	// Allocator sizes blocks (one that sizes nothing when the allocator
	// is unknown or did not pass the probes).
	Allocator
	// Named is the allocator the mappings named, before the probes.
	Named Kind
	// Why says why the allocator sizes nothing ("" when it sizes).
	Why string
}

// Name returns which allocator the process's mappings show: jemalloc when
// a libjemalloc is mapped, musl's when the process runs on musl, else
// glibc's when glibc is mapped. A statically linked process with none of
// them mapped is Unknown.
func Name(maps []target.Mapping) Kind {
	var glibc, musl, jemalloc, other bool
	for _, m := range maps {
		base := filepath.Base(m.Path)
		switch {
		case strings.HasPrefix(base, "libjemalloc"):
			jemalloc = true
		case strings.HasPrefix(base, "libtcmalloc"), strings.HasPrefix(base, "libmimalloc"):
			other = true
		case libc.IsMusl(m.Path):
			musl = true
		case libc.IsGlibc(m.Path):
			glibc = true
		}
	}
	switch {
	case jemalloc:
		return Jemalloc
	case other:
		return Unknown
	case musl:
		return Mallocng
	case glibc:
		return Glibc
	}
	return Unknown
}

// Identify names the process's allocator from its mappings and checks it
// against the probes (at least one is needed): every probe's block must
// be sized by the allocator within fits.
func Identify(r Reader, maps []target.Mapping, probes []Probe) Identified {
	named := Name(maps)
	var a Allocator
	var err error
	switch named {
	case Glibc:
		a = glibcAllocator{r: r}
	case Jemalloc:
		a, err = newJemalloc(r, maps, probes)
	case Mallocng:
		a, err = newMallocng(r, maps, probes)
	default:
		err = fmt.Errorf("no allocator rbscope knows is mapped")
	}
	if err == nil {
		err = check(a, probes)
	}
	if err != nil {
		return Identified{Allocator: none{}, Named: named, Why: err.Error()}
	}
	return Identified{Allocator: a, Named: named}
}

// check asks a to size every probe.
func check(a Allocator, probes []Probe) error {
	if len(probes) == 0 {
		return fmt.Errorf("no block of known size to check %s's metadata against", a.Kind())
	}
	for _, p := range probes {
		n, ok := a.UsableSize(p.Addr)
		if !ok || !fits(n, p.Size) {
			return fmt.Errorf("%s's metadata sizes the %d-byte block at %#x as %d bytes (ok=%v)", a.Kind(), p.Size, p.Addr, n, ok)
		}
	}
	return nil
}

// fits reports whether a block sized n can hold a struct of size bytes:
// at least three quarters of it (patch releases grow and shrink structs
// by a few fields, and a layout made from one serves its whole family)
// and less than twice it plus a page.
func fits(n, size uint64) bool {
	return 4*n >= 3*size && n <= 2*size+4096
}

// none sizes nothing.
type none struct{}

func (none) Kind() Kind                       { return Unknown }
func (none) UsableSize(uint64) (uint64, bool) { return 0, false }

// word reads one little-endian word.
func word(r Reader, addr uint64) (uint64, bool) {
	var b [8]byte
	if n, err := r.ReadAt(b[:], addr); n != 8 || err != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// glibcAllocator reads ptmalloc's chunk header: the word before a block
// holds the chunk's size (a multiple of 16, at least 32) and three flag
// bits, of which IS_MMAPPED (2) says the chunk has a second word of
// overhead.
type glibcAllocator struct{ r Reader }

func (glibcAllocator) Kind() Kind { return Glibc }

func (g glibcAllocator) UsableSize(addr uint64) (uint64, bool) {
	if addr&15 != 0 || addr < 16 {
		return 0, false
	}
	hdr, ok := word(g.r, addr-8)
	if !ok {
		return 0, false
	}
	size := hdr &^ 7
	if size < 32 || size&15 != 0 || size > 1<<40 {
		return 0, false
	}
	if hdr&2 != 0 { // IS_MMAPPED
		return size - 16, true
	}
	return size - 8, true
}
