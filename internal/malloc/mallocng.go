package malloc

import (
	"encoding/binary"
	"fmt"

	"github.com/rbscope/rbscope/internal/target"
)

// musl's mallocng (musl 1.2.1 and later) hands out slots of groups. A
// group starts with a 16-byte header whose first word points to the
// group's meta, kept out of band in a meta area (one 4 KiB page that
// starts with a secret check word shared by every area). Each slot has a
// 4-byte in-band header right before the block:
//
//	p[-4]   0, or non-zero when the block's offset does not fit 16 bits
//	        (the offset is then the uint32 at p[-8])
//	p[-3]   low 5 bits: the slot's index in its group; high 3 bits: the
//	        bytes reserved at the slot's end (5: the count is the uint32
//	        in the slot's last 4 bytes)
//	p[-2:]  uint16: the block's offset from the group's storage, in
//	        16-byte units
//
// The group's meta records the size class (stride), the slots in use and,
// for a group mapped on its own, its length in pages. malloc_usable_size
// returns the nominal size: the slot's end (stride - 4 bytes from its
// start) less the reserved bytes, from the block's start.
const (
	ngUnit       = 16 // UNIT: slot and group alignment
	ngIB         = 4  // IB: the in-band header's size
	ngAreaHeader = 24 // struct meta_area: check, next, nslots (+pad)
	ngMetaSize   = 40 // struct meta: prev, next, mem, avail_mask, freed_mask, bit fields
	ngPage       = 4096
	// ngMaxMap bounds the length of a group mapped on its own (maplen
	// pages): larger than any address space rbscope reads.
	ngMaxMap = 1 << 47
)

// ngSizeClasses is mallocng's size_classes table: class i's stride in
// 16-byte units.
var ngSizeClasses = [48]uint64{
	1, 2, 3, 4, 5, 6, 7, 8,
	9, 10, 12, 15,
	18, 20, 25, 31,
	36, 42, 50, 63,
	72, 84, 102, 127,
	146, 170, 204, 255,
	292, 340, 409, 511,
	584, 682, 818, 1023,
	1169, 1364, 1637, 2047,
	2340, 2730, 3276, 4095,
	4680, 5460, 6552, 8191,
}

// mallocng sizes blocks from their in-band headers and their groups'
// metas, in meta areas whose check word is secret.
type mallocng struct {
	r      Reader
	secret uint64
}

func (mallocng) Kind() Kind { return Mallocng }

// newMallocng returns the sizer of musl's mallocng. The meta areas' check
// word (ctx.secret, in libc's hidden data) is learnt from the meta area of
// the first probe's group, found without it; Identify then checks every
// probe with it.
func newMallocng(r Reader, _ []target.Mapping, probes []Probe) (Allocator, error) {
	if len(probes) == 0 {
		return nil, fmt.Errorf("no block of known size to find mallocng's meta areas with")
	}
	m := mallocng{r: r}
	area, _, err := m.slot(probes[0].Addr, false)
	if err != nil {
		return nil, fmt.Errorf("musl's mallocng: the %d-byte block at %#x: %w", probes[0].Size, probes[0].Addr, err)
	}
	m.secret, _ = word(r, area)
	return m, nil
}

func (m mallocng) UsableSize(addr uint64) (uint64, bool) {
	_, n, err := m.slot(addr, true)
	return n, err == nil
}

// ngMeta is the part of struct meta that sizing reads.
type ngMeta struct {
	mem                  uint64
	availMask, freedMask uint32
	lastIdx, sizeclass   uint64
	maplen               uint64
}

// slot follows mallocng's get_meta, get_stride and get_nominal_size for
// the block at p, checking every field it reads as they do, and returns
// the block's meta area and nominal size. With checkSecret the meta
// area's check word must be the secret.
func (m mallocng) slot(p uint64, checkSecret bool) (area, n uint64, err error) {
	if p&(ngUnit-1) != 0 || p < 2*ngUnit || p>>47 != 0 {
		return 0, 0, fmt.Errorf("%#x is not a 16-byte aligned user address", p)
	}
	var hdr [8]byte // p[-8:0]
	if err := target.ReadFull(m.r, hdr[:], p-8); err != nil {
		return 0, 0, fmt.Errorf("reading the in-band header: %w", err)
	}
	offset := uint64(binary.LittleEndian.Uint16(hdr[6:]))
	index := uint64(hdr[5] & 31)
	reserved := uint64(hdr[5] >> 5)
	if hdr[4] != 0 {
		if offset != 0 {
			return 0, 0, fmt.Errorf("a large-offset header with a 16-bit offset")
		}
		offset = uint64(binary.LittleEndian.Uint32(hdr[:4]))
		if offset <= 0xffff {
			return 0, 0, fmt.Errorf("a large offset of %d units", offset)
		}
	}
	if ngUnit*offset+ngUnit > p {
		return 0, 0, fmt.Errorf("offset %d units points before address 0", offset)
	}
	base := p - ngUnit*offset - ngUnit // the group
	metaAddr, ok := word(m.r, base)
	if !ok || metaAddr&7 != 0 || metaAddr == 0 || metaAddr>>47 != 0 {
		return 0, 0, fmt.Errorf("no meta pointer at the group %#x", base)
	}
	var mb [ngMetaSize]byte
	if err := target.ReadFull(m.r, mb[:], metaAddr); err != nil {
		return 0, 0, fmt.Errorf("reading the meta at %#x: %w", metaAddr, err)
	}
	bits := binary.LittleEndian.Uint64(mb[32:])
	g := ngMeta{
		mem:       binary.LittleEndian.Uint64(mb[16:]),
		availMask: binary.LittleEndian.Uint32(mb[24:]),
		freedMask: binary.LittleEndian.Uint32(mb[28:]),
		lastIdx:   bits & 31,
		sizeclass: bits >> 6 & 63,
		maplen:    bits >> 12,
	}
	if g.mem != base {
		return 0, 0, fmt.Errorf("the meta at %#x is not the group %#x's", metaAddr, base)
	}
	if index > g.lastIdx || g.availMask&(1<<index) != 0 || g.freedMask&(1<<index) != 0 {
		return 0, 0, fmt.Errorf("slot %d of the group %#x is not in use", index, base)
	}
	area = metaAddr &^ (ngPage - 1)
	var ab [ngAreaHeader]byte
	if err := target.ReadFull(m.r, ab[:], area); err != nil {
		return 0, 0, fmt.Errorf("reading the meta area %#x: %w", area, err)
	}
	nslots := uint64(binary.LittleEndian.Uint32(ab[16:]))
	if metaAddr < area+ngAreaHeader || (metaAddr-area-ngAreaHeader)%ngMetaSize != 0 ||
		(metaAddr-area-ngAreaHeader)/ngMetaSize >= nslots || area+ngAreaHeader+nslots*ngMetaSize > area+ngPage {
		return 0, 0, fmt.Errorf("the meta %#x is not a slot of its meta area", metaAddr)
	}
	if checkSecret && binary.LittleEndian.Uint64(ab[:]) != m.secret {
		return 0, 0, fmt.Errorf("the meta area %#x's check word is not the allocator's", area)
	}
	switch {
	case g.sizeclass < 48:
		sc := ngSizeClasses[g.sizeclass]
		if offset < sc*index || offset >= sc*(index+1) {
			return 0, 0, fmt.Errorf("offset %d units is not in slot %d of size class %d", offset, index, g.sizeclass)
		}
	case g.sizeclass != 63:
		return 0, 0, fmt.Errorf("size class %d", g.sizeclass)
	}
	if g.maplen > ngMaxMap/ngPage {
		return 0, 0, fmt.Errorf("a group of %d pages", g.maplen)
	}
	if g.maplen != 0 && offset > g.maplen*ngPage/ngUnit-1 {
		return 0, 0, fmt.Errorf("offset %d units past the group's %d pages", offset, g.maplen)
	}
	var stride uint64
	switch {
	case g.lastIdx == 0 && g.maplen != 0:
		stride = g.maplen*ngPage - ngUnit
	case g.sizeclass < 48:
		stride = ngUnit * ngSizeClasses[g.sizeclass]
	default:
		return 0, 0, fmt.Errorf("a group of size class 63 with %d slots", g.lastIdx+1)
	}
	start := base + ngUnit + stride*index
	end := start + stride - ngIB
	if p < start || p >= end || end>>47 != 0 {
		return 0, 0, fmt.Errorf("the block %#x is not inside its slot", p)
	}
	var tail [6]byte // end[-5:1]
	if err := target.ReadFull(m.r, tail[:], end-5); err != nil {
		return 0, 0, fmt.Errorf("reading the slot's end: %w", err)
	}
	if reserved >= 5 {
		if reserved != 5 || tail[0] != 0 {
			return 0, 0, fmt.Errorf("a bad reserved count")
		}
		reserved = uint64(binary.LittleEndian.Uint32(tail[1:5]))
		if reserved < 5 {
			return 0, 0, fmt.Errorf("a bad reserved count")
		}
	}
	if reserved > end-p {
		return 0, 0, fmt.Errorf("%d reserved bytes in a %d-byte block", reserved, end-p)
	}
	if reserved != 0 {
		var z [1]byte
		if err := target.ReadFull(m.r, z[:], end-reserved); err != nil || z[0] != 0 {
			return 0, 0, fmt.Errorf("no zero byte where the reserved bytes start")
		}
	}
	if tail[5] != 0 {
		return 0, 0, fmt.Errorf("the slot's overflow byte is not zero")
	}
	return area, end - reserved - p, nil
}
