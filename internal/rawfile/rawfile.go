// Package rawfile lays out arrays of numbers in a file so that a later
// run uses them in place, from the file mapped into memory, rather than
// decoding them: each array is written as it is in memory
// (little-endian, the byte order of every platform rbscope runs on) at
// an 8-byte boundary of the stream, after a gob-encoded head that holds
// the small fields and the arrays' lengths. A Reader hands out slices
// over the bytes, each bounded by what is there; what the numbers in
// them index is the caller's to check.
package rawfile

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Number is what an array holds.
type Number interface {
	uint8 | uint32 | uint64 | int64
}

// align is the boundary every part of a stream starts at.
const align = 8

var zeros [align]byte

// Writer writes a stream of parts, each at an 8-byte boundary counted
// from the stream's start.
type Writer struct {
	w   io.Writer
	off int64
	err error
}

// NewWriter writes the stream to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

func (w *Writer) write(p []byte) {
	if w.err != nil || len(p) == 0 {
		return
	}
	var n int
	n, w.err = w.w.Write(p)
	w.off += int64(n)
}

func (w *Writer) pad() {
	if r := w.off % align; r != 0 {
		w.write(zeros[:align-r])
	}
}

// Gob writes v gob-encoded, after its length.
func (w *Writer) Gob(v any) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil && w.err == nil {
		w.err = err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(b.Len()))
	w.write(n[:])
	w.write(b.Bytes())
	w.pad()
}

// Put writes s as it is in memory; its length is the caller's to keep.
func Put[T Number](w *Writer, s []T) {
	if len(s) > 0 {
		w.write(unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0]))))
	}
	w.pad()
}

// Err returns the first error met writing.
func (w *Writer) Err() error { return w.err }

// Reader takes the parts of a stream a Writer wrote, in the same order,
// from bytes in memory.
type Reader struct {
	b   []byte
	off int
	err error
}

// NewReader reads the stream in b, which must start at an 8-byte
// boundary of memory (a mapping does; see Aligned otherwise).
func NewReader(b []byte) *Reader {
	r := &Reader{b: b}
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%align != 0 {
		r.err = errors.New("stream not aligned in memory")
	}
	return r
}

// Aligned returns b, or a copy of it at an 8-byte boundary of memory.
func Aligned(b []byte) []byte {
	if len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%align == 0 {
		return b
	}
	words := make([]uint64, (len(b)+7)/8)
	out := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
	copy(out, b)
	return out
}

func (r *Reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

// skip moves past n bytes and the padding after them, returning them.
func (r *Reader) skip(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("cut short at byte %d (%d more wanted, %d there)", r.off, n, len(r.b)-r.off)
		return nil
	}
	padded := n + (align-n%align)%align
	if padded > len(r.b)-r.off {
		r.fail("cut short at byte %d (%d more wanted, %d there)", r.off, padded, len(r.b)-r.off)
		return nil
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += padded
	return p
}

// Gob decodes into v what Writer.Gob wrote.
func (r *Reader) Gob(v any) {
	n := r.skip(8)
	if r.err != nil {
		return
	}
	size := binary.LittleEndian.Uint64(n)
	if size > math.MaxInt32 {
		r.fail("head of %d bytes", size)
		return
	}
	p := r.skip(int(size))
	if r.err != nil {
		return
	}
	if err := gob.NewDecoder(bytes.NewReader(p)).Decode(v); err != nil {
		r.fail("head: %w", err)
	}
}

// Take returns the next array, of n values, over the stream's bytes (do
// not keep it past the bytes' life); nil and an error when the stream
// is shorter.
func Take[T Number](r *Reader, n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n < 0 || n > math.MaxInt/size {
		r.fail("array of %d values", n)
		return nil
	}
	p := r.skip(n * size)
	if r.err != nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&p[0])), n)
}

// Offset is how many bytes of the stream were read.
func (r *Reader) Offset() int { return r.off }

// Err returns the first error met reading.
func (r *Reader) Err() error { return r.err }

// Map maps the file f into memory, private to this process (a write to
// the mapping changes a copy of the page, never the file) and readable
// and writable. The mapping lives as long as the process: the slices
// taken from it may be kept anywhere. The file must not be cut while it
// is mapped (a page past its end faults the process): write such files
// whole to a temporary name and rename them into place, as a later
// writer then replaces the name and never the file mapped.
func Map(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("%s: %d bytes: nothing to map", f.Name(), size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	return b, nil
}

// Unmap releases a mapping Map made, for a file found unusable.
func Unmap(b []byte) { unix.Munmap(b) }

// Check runs check over [0, n) in parallel chunks, one per CPU, and
// returns the first non-empty answer of a chunk, or "".
func Check(n int, check func(lo, hi int) string) string {
	parts := runtime.GOMAXPROCS(0)
	if n < 1<<16 || parts < 2 {
		return check(0, n)
	}
	out := make([]string, parts)
	var wg sync.WaitGroup
	for k := range parts {
		lo, hi := n*k/parts, n*(k+1)/parts
		wg.Go(func() { out[k] = check(lo, hi) })
	}
	wg.Wait()
	for _, s := range out {
		if s != "" {
			return s
		}
	}
	return ""
}
