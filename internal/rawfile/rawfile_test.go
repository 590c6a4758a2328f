package rawfile

import (
	"bytes"
	"slices"
	"testing"
)

type head struct {
	Name   string
	A, B   int
	Values []uint64
}

func write(t *testing.T) ([]byte, head, []uint8, []uint32, []uint64) {
	t.Helper()
	h := head{Name: "x", A: 5, B: 3, Values: []uint64{7, 9}}
	a := []uint8{1, 2, 3, 4, 5}
	b := []uint32{10, 20, 30}
	c := []uint64{1 << 40, 2, 3, 4, 5}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	Put(w, a) // first, to put the parts after it off their natural alignment
	w.Gob(&h)
	Put(w, b)
	Put(w, []uint32(nil))
	Put(w, c)
	if w.Err() != nil {
		t.Fatal(w.Err())
	}
	return buf.Bytes(), h, a, b, c
}

func read(stream []byte) (h head, a []uint8, b []uint32, c []uint64, err error) {
	r := NewReader(Aligned(bytes.Clone(stream)))
	a = Take[uint8](r, 5)
	r.Gob(&h)
	b = Take[uint32](r, h.B)
	Take[uint32](r, 0)
	c = Take[uint64](r, h.A)
	return h, a, b, c, r.Err()
}

func TestRoundTrip(t *testing.T) {
	stream, h, a, b, c := write(t)
	if len(stream)%8 != 0 {
		t.Errorf("stream of %d bytes: parts not padded to 8", len(stream))
	}
	h2, a2, b2, c2, err := read(stream)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Name != h.Name || !slices.Equal(h2.Values, h.Values) || !slices.Equal(a, a2) || !slices.Equal(b, b2) || !slices.Equal(c, c2) {
		t.Errorf("read back %+v %v %v %v, wrote %+v %v %v %v", h2, a2, b2, c2, h, a, b, c)
	}
	// Cut anywhere: an error, never a panic nor a short array.
	for cut := range len(stream) {
		if _, _, _, _, err := read(stream[:cut]); err == nil {
			t.Errorf("cut at %d of %d: no error", cut, len(stream))
		}
	}
	// A length larger than the stream is an error, not an allocation.
	r := NewReader(Aligned(bytes.Clone(stream)))
	if Take[uint64](r, 1<<60); r.Err() == nil {
		t.Errorf("an array of 1<<60 values: no error")
	}
	// Bytes off an 8-byte boundary are refused (Aligned copies them).
	odd := make([]byte, len(stream)+1)
	copy(odd[1:], stream)
	if NewReader(odd[1:]).Err() == nil {
		t.Errorf("unaligned stream accepted")
	}
	if _, _, _, _, err := read(odd[1:]); err != nil {
		t.Errorf("unaligned stream, copied by Aligned: %v", err)
	}
}
