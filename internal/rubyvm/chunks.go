package rubyvm

import "github.com/rbscope/rbscope/internal/target"

// chunkCache serves small reads of a target from aligned chunks it keeps,
// so that a walk reading many small buffers close together (the malloc'd
// contents of Strings, Arrays and Hashes, often allocated one after the
// other) makes one system call per chunk instead of one per buffer. It is
// for a process that is paused, or one whose torn reads the caller
// tolerates: a chunk is not read again while it stays cached.
type chunkCache struct {
	t      target.Target
	chunks [chunkCount]chunk
	next   int // the chunk to replace next (round robin)
}

const (
	chunkSize  = 16 << 10
	chunkCount = 64
)

type chunk struct {
	base uint64
	data []byte // nil until first loaded; valid when ok
	ok   bool
}

// read fills dst from addr, as target.ReadFull does.
func (c *chunkCache) read(dst []byte, addr uint64) error {
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
