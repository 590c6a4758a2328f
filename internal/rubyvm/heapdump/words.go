package heapdump

import "encoding/binary"

// at returns base plus a layout offset.
func at(base uint64, off int64) uint64 { return base + uint64(off) }

// le64 and le32 read a little-endian word of b at a layout offset.
func le64(b []byte, off int64) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func le32(b []byte, off int64) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
