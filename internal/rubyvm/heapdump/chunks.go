package heapdump

import "github.com/rbscope/rbscope/internal/target"

// chunkCache serves small reads of a target from aligned chunks it keeps,
// so that a walk reading many small buffers close together (the malloc'd
// contents of Strings, Arrays and Hashes, often allocated one after the
// other) makes one system call per chunk instead of one per buffer. It is
// for a process that is paused, or one whose torn reads the caller
// tolerates: a chunk is not read again while it stays cached. A snapshot's
// copy is read in place, without chunks.
//
// A dump's read budget (budgeted) is charged for what the decoders ask,
// not for the chunks read ahead around it: under glibc's malloc a real
// application's small buffers lie scattered over hundreds of megabytes,
// and charging each 16 KiB chunk read for an 8-byte ask spent the budget
// of a benign Rails process (a chunk is read about once per three asks
// there). A chunk read is charged chunkFillCharge, so that the work of
// the reads ahead stays bounded by the budget too (at most
// chunkSize/chunkFillCharge times it).
type chunkCache struct {
	t      target.Target // read for the chunks, not charged
	budget *budgeted     // charged for each read; nil: none
	copied slicer        // t's copy of the process, when t is a snapshot
	chunks [chunkCount]chunk
	next   int // the chunk to replace next (round robin)
}

// slicer is a target that holds a copy of the process (target.Snapshot,
// and the budgeted reader of one): Slice returns the copy of n bytes at
// addr in place, when it holds them all.
type slicer interface {
	Slice(addr uint64, n int) ([]byte, bool)
}

const (
	chunkSize  = 16 << 10
	chunkCount = 64
	// chunkFillCharge is what a chunk read costs the read budget, beside
	// the bytes asked.
	chunkFillCharge = 1 << 10
)

type chunk struct {
	base uint64
	data []byte // nil until first loaded; valid when ok
	ok   bool
}

// setTarget makes the cache read t; a budgeted t is charged per read, its
// target read for the chunks.
func (c *chunkCache) setTarget(t target.Target) {
	c.budget = nil
	if b, ok := t.(*budgeted); ok {
		c.budget, t = b, b.Target
	}
	c.t = t
	c.copied, _ = t.(slicer)
	for i := range c.chunks {
		c.chunks[i].ok = false
	}
}

// read fills dst from addr, as target.ReadFull does.
func (c *chunkCache) read(dst []byte, addr uint64) error {
	if err := c.budget.spend(int64(len(dst))); err != nil {
		return err
	}
	if c.copied != nil {
		if b, ok := c.copied.Slice(addr, len(dst)); ok {
			copy(dst, b)
			return nil
		}
		return target.ReadFull(c.t, dst, addr)
	}
	base := addr &^ (chunkSize - 1)
	if len(dst) > chunkSize/4 || addr+uint64(len(dst)) > base+chunkSize {
		return target.ReadFull(c.t, dst, addr)
	}
	for i := range c.chunks {
		if ch := &c.chunks[i]; ch.ok && ch.base == base {
			copy(dst, ch.data[addr-base:])
			return nil
		}
	}
	if err := c.budget.spend(chunkFillCharge); err != nil {
		return err
	}
	ch := &c.chunks[c.next]
	c.next = (c.next + 1) % chunkCount
	if ch.data == nil {
		ch.data = make([]byte, chunkSize)
	}
	if err := target.ReadFull(c.t, ch.data, base); err != nil {
		// The chunk runs past the end of a mapping: read just what was asked.
		ch.ok = false
		return target.ReadFull(c.t, dst, addr)
	}
	ch.base, ch.ok = base, true
	copy(dst, ch.data[addr-base:])
	return nil
}
