package rubyvm

import "github.com/rbscope/rbscope/internal/rubyvm/layout"

// objHeader is where an object keeps its elements (a String's bytes, an
// Array's VALUEs): embedded in its slot from off, or in a buffer at ptr.
type objHeader struct {
	length   uint64 // bytes of a String, elements of an Array
	embedded bool
	off      int64  // offset of the embedded elements in the slot
	ptr      uint64 // address of the out-of-slot buffer (not embedded)
}

// strHeaderLen is how many bytes of a String's slot strHeader reads.
func strHeaderLen(L *layout.Layout) int {
	return int(max(L.RBasicFlags, L.RStringLen, L.RStringHeapLen, L.RStringHeapPtr, L.RStringEmbedLen) + 8)
}

// strHeader decodes an RString from the first strHeaderLen bytes of its
// slot: the one place the String length rules live (a length word of its
// own since 3.2, a heap length, an embedded length word (3.1) or bits of
// the flags (before)).
func strHeader(L *layout.Layout, slot []byte, flags uint64) objHeader {
	if flags&uint64(L.RStringNoEmbed) != 0 {
		lenOff := L.RStringHeapLen
		if L.RStringLen >= 0 {
			lenOff = L.RStringLen
		}
		return objHeader{length: le64(slot, lenOff), ptr: le64(slot, L.RStringHeapPtr)}
	}
	h := objHeader{embedded: true, off: L.RStringEmbedAry}
	switch {
	case L.RStringLen >= 0:
		h.length = le64(slot, L.RStringLen)
	case L.RStringEmbedLen >= 0:
		h.length = le64(slot, L.RStringEmbedLen)
	default:
		h.length = (flags & uint64(L.RStringEmbedLenMask)) >> uint64(L.RStringEmbedLenShift)
	}
	return h
}

// aryHeaderLen is how many bytes of an Array's slot aryHeader reads.
func aryHeaderLen(L *layout.Layout) int {
	return int(max(L.RBasicFlags, L.RArrayHeapLen, L.RArrayHeapPtr) + 8)
}

// aryHeader decodes an RArray from the first aryHeaderLen bytes of its
// slot: the one place the Array length rules live.
func aryHeader(L *layout.Layout, slot []byte, flags uint64) objHeader {
	if flags&uint64(L.RArrayEmbedFlag) != 0 {
		return objHeader{embedded: true, off: L.RArrayEmbedAry,
			length: (flags & uint64(L.RArrayEmbedLenMask)) >> uint64(L.RArrayEmbedLenShift)}
	}
	return objHeader{length: le64(slot, L.RArrayHeapLen), ptr: le64(slot, L.RArrayHeapPtr)}
}
