package rubyvm

import "github.com/rbscope/rbscope/internal/rubyvm/layout"

// ObjHeader is where an object keeps its elements (a String's bytes, an
// Array's VALUEs): embedded in its slot from Off, or in a buffer at Ptr.
type ObjHeader struct {
	Length   uint64 // bytes of a String, elements of an Array
	Embedded bool
	Off      int64  // offset of the embedded elements in the slot
	Ptr      uint64 // address of the out-of-slot buffer (not embedded)
}

// strHeaderLen is how many bytes of a String's slot StrHeader reads.
func strHeaderLen(L *layout.Layout) int {
	return int(max(L.RBasicFlags, L.RStringLen, L.RStringHeapLen, L.RStringHeapPtr, L.RStringEmbedLen) + 8)
}

// StrHeader decodes an RString from the first strHeaderLen bytes of its
// slot: the one place the String length rules live (a length word of its
// own since 3.2, a heap length, an embedded length word (3.1) or bits of
// the flags (before)).
func StrHeader(L *layout.Layout, slot []byte, flags uint64) ObjHeader {
	if flags&uint64(L.RStringNoEmbed) != 0 {
		lenOff := L.RStringHeapLen
		if L.RStringLen >= 0 {
			lenOff = L.RStringLen
		}
		return ObjHeader{Length: le64(slot, lenOff), Ptr: le64(slot, L.RStringHeapPtr)}
	}
	h := ObjHeader{Embedded: true, Off: L.RStringEmbedAry}
	switch {
	case L.RStringLen >= 0:
		h.Length = le64(slot, L.RStringLen)
	case L.RStringEmbedLen >= 0:
		h.Length = le64(slot, L.RStringEmbedLen)
	default:
		h.Length = (flags & uint64(L.RStringEmbedLenMask)) >> uint64(L.RStringEmbedLenShift)
	}
	return h
}

// aryHeaderLen is how many bytes of an Array's slot AryHeader reads.
func aryHeaderLen(L *layout.Layout) int {
	return int(max(L.RBasicFlags, L.RArrayHeapLen, L.RArrayHeapPtr) + 8)
}

// AryHeader decodes an RArray from the first aryHeaderLen bytes of its
// slot: the one place the Array length rules live.
func AryHeader(L *layout.Layout, slot []byte, flags uint64) ObjHeader {
	if flags&uint64(L.RArrayEmbedFlag) != 0 {
		return ObjHeader{Embedded: true, Off: L.RArrayEmbedAry,
			Length: (flags & uint64(L.RArrayEmbedLenMask)) >> uint64(L.RArrayEmbedLenShift)}
	}
	return ObjHeader{Length: le64(slot, L.RArrayHeapLen), Ptr: le64(slot, L.RArrayHeapPtr)}
}
