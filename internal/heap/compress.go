package heap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression is how a dump file's bytes are compressed. A dump is
// written compressed when its file's name asks for it (CompressionOf) and
// read whatever its compression, told by its first bytes (Open).
type Compression int

const (
	// Plain is an uncompressed dump.
	Plain Compression = iota
	// Zstd is a zstd stream (name suffix .zst).
	Zstd
	// Gzip is a gzip stream (name suffix .gz).
	Gzip
)

// compressions is the one table of the compressions a dump may have: the
// suffix that asks for it when writing, the magic bytes that tell it
// when reading.
var compressions = []struct {
	c      Compression
	name   string
	suffix string
	magic  []byte
}{
	{Zstd, "zstd", ".zst", []byte{0x28, 0xb5, 0x2f, 0xfd}},
	{Gzip, "gzip", ".gz", []byte{0x1f, 0x8b}},
}

func (c Compression) String() string {
	for _, e := range compressions {
		if e.c == c {
			return e.name
		}
	}
	return "plain"
}

// CompressionOf returns the compression the name of a dump file asks for
// by its suffix (.zst, .gz; case-insensitive), Plain for any other. A
// name that ends in another compressor's suffix (.bz2, .xz, .lz4, .zstd,
// .gzip, .zip) is refused, as is one with two compression suffixes
// (heap.gz.zst), rather than written as something it does not say.
func CompressionOf(name string) (Compression, error) {
	lower := strings.ToLower(name)
	for _, e := range compressions {
		if !strings.HasSuffix(lower, e.suffix) {
			continue
		}
		rest := strings.TrimSuffix(lower, e.suffix)
		for _, o := range compressions {
			if strings.HasSuffix(rest, o.suffix) {
				return Plain, fmt.Errorf("%s: two compression suffixes (%s%s): name the file with one, .zst or .gz", name, o.suffix, e.suffix)
			}
		}
		return e.c, nil
	}
	for _, s := range []string{".bz2", ".xz", ".lz4", ".lzma", ".zstd", ".gzip", ".zip", ".z", ".br", ".sz"} {
		if strings.HasSuffix(lower, s) {
			return Plain, fmt.Errorf("%s: rbscope writes dumps plain, zstd (.zst) or gzip (.gz), not %s: name the file .jsonl, .jsonl.zst or .jsonl.gz", name, s)
		}
	}
	return Plain, nil
}

// Sniff returns the compression whose magic bytes head (a file's first
// bytes) begins with, Plain for none.
func Sniff(head []byte) Compression {
	for _, e := range compressions {
		if bytes.HasPrefix(head, e.magic) {
			return e.c
		}
	}
	return Plain
}

// ZstdLevel is the zstd level dumps are written at: the fastest, 0.8 s of
// CPU for a 380 MB dump, on the second core while the first decodes
// (docs/guides/memory-leak.md has the figures). The default level took
// 1.4x its CPU and, on dumps, compressed worse (28.3 MB against 25.7).
const ZstdLevel = zstd.SpeedFastest

// GzipLevel is the gzip level dumps are written at: gzip's fastest that
// still compresses with Huffman and matches (level 1).
const GzipLevel = gzip.BestSpeed

// NewWriter returns a writer that compresses what is written to it as c
// says and writes it to w, on the fly; Close writes the compressed
// stream's end (and not w's). For Plain it writes through.
func NewWriter(w io.Writer, c Compression) (io.WriteCloser, error) {
	switch c {
	case Zstd:
		// Compressed on a goroutine of its own while the dump's decode
		// goes on (the encoder's async stream), not in parallel jobs
		// (WithConcurrentBlocks): on two cores the decode holds one, and
		// the jobs took 100 MB more memory for no time gained.
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(ZstdLevel), zstd.WithEncoderConcurrency(min(2, runtime.GOMAXPROCS(0))))
		if err != nil {
			return nil, err
		}
		sw := &seekableWriter{w: &Counter{W: w}, enc: enc}
		enc.Reset(sw.w)
		return sw, nil
	case Gzip:
		z, err := gzip.NewWriterLevel(w, GzipLevel)
		if err != nil {
			return nil, err
		}
		// gzip's writer compresses as it is called: on a goroutine of its
		// own, beside the dump's decode, as zstd's does.
		return newAsyncWriter(z), nil
	}
	return nopCloser{w}, nil
}

// asyncWriter hands what is written to it, in buffers of asyncBuf bytes,
// to a goroutine that writes them to w: the caller goes on meanwhile.
type asyncWriter struct {
	w    io.WriteCloser
	buf  []byte
	full chan []byte
	free chan []byte
	done chan error
	// failed holds the goroutine's first error, for Write to return.
	failed atomic.Pointer[error]
}

const asyncBuf = 1 << 20

func newAsyncWriter(w io.WriteCloser) *asyncWriter {
	a := &asyncWriter{w: w, full: make(chan []byte, 2), free: make(chan []byte, 3), done: make(chan error, 1)}
	for range 2 {
		a.free <- make([]byte, 0, asyncBuf)
	}
	a.buf = make([]byte, 0, asyncBuf)
	go func() {
		var err error
		for b := range a.full {
			if err == nil {
				if _, err = w.Write(b); err != nil {
					a.failed.Store(&err)
				}
			}
			a.free <- b[:0]
		}
		a.done <- err
	}()
	return a
}

func (a *asyncWriter) Write(p []byte) (int, error) {
	if err := a.failed.Load(); err != nil {
		return 0, *err
	}
	n := 0
	for len(p) > 0 {
		k := copy(a.buf[len(a.buf):cap(a.buf)], p)
		a.buf, p, n = a.buf[:len(a.buf)+k], p[k:], n+k
		if len(a.buf) == cap(a.buf) {
			a.full <- a.buf
			a.buf = <-a.free
		}
	}
	return n, nil
}

// Close writes what is left, waits for the goroutine, and closes w.
func (a *asyncWriter) Close() error {
	if len(a.buf) > 0 {
		a.full <- a.buf
		a.buf = nil
	}
	close(a.full)
	err := <-a.done
	if cerr := a.w.Close(); err == nil {
		err = cerr
	}
	return err
}

// A zstd dump is written as frames of zstdFrame bytes each (before
// compression), which a decoder reads as one stream, followed by a seek
// table: the zstd seekable format (a skippable frame that zstd's own
// tools pass over; facebook/zstd's contrib/seekable_format). The UI reads
// an object's line from the frame that holds it (File.From) rather than
// decompressing the dump up to it.
var zstdFrame = 4 << 20 // a variable for the tests

const (
	skippableMagic    = 0x184D2A5E
	seekableMagic     = 0x8F92EAB1
	seekFooterLen     = 9 // frames (u32), descriptor (u8), seekableMagic (u32)
	seekEntryLen      = 8 // compressed, decompressed size (u32 each)
	seekableMaxFrames = 1 << 27
)

// seekableWriter writes zstd frames of zstdFrame bytes each, then the
// seek table.
type seekableWriter struct {
	w      *Counter
	enc    *zstd.Encoder
	in     int    // this frame's bytes so far
	start  int64  // where this frame starts in w
	frames []byte // the seek table's entries
}

func (s *seekableWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), zstdFrame-s.in)
		m, err := s.enc.Write(p[:k])
		n += m
		s.in += m
		if err != nil {
			return n, err
		}
		p = p[k:]
		if s.in == zstdFrame {
			if err := s.endFrame(); err != nil {
				return n, err
			}
			s.enc.Reset(s.w)
		}
	}
	return n, nil
}

// endFrame ends the frame being written and notes it in the seek table.
func (s *seekableWriter) endFrame() error {
	if err := s.enc.Close(); err != nil {
		return err
	}
	s.frames = binary.LittleEndian.AppendUint32(s.frames, uint32(s.w.N-s.start))
	s.frames = binary.LittleEndian.AppendUint32(s.frames, uint32(s.in))
	s.start, s.in = s.w.N, 0
	return nil
}

// Close ends the last frame and writes the seek table.
func (s *seekableWriter) Close() error {
	if s.in > 0 || len(s.frames) == 0 {
		if err := s.endFrame(); err != nil {
			return err
		}
	}
	n := len(s.frames) / seekEntryLen
	t := binary.LittleEndian.AppendUint32(nil, skippableMagic)
	t = binary.LittleEndian.AppendUint32(t, uint32(len(s.frames)+seekFooterLen))
	t = append(t, s.frames...)
	t = binary.LittleEndian.AppendUint32(t, uint32(n))
	t = append(t, 0) // no checksums
	t = binary.LittleEndian.AppendUint32(t, seekableMagic)
	_, err := s.w.Write(t)
	return err
}

// Counter is a writer that counts the bytes written through it to W.
type Counter struct {
	W io.Writer
	N int64
}

func (c *Counter) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}

// seekTable reads the seek table at the end of a zstd file of size
// bytes: where each frame starts, compressed (c) and decompressed (d),
// one more entry than frames for the ends. ok is false for a file
// without one (written by another program, or cut short).
func seekTable(f io.ReaderAt, size int64) (c, d []int64, ok bool) {
	var foot [seekFooterLen]byte
	if size < seekFooterLen+8 {
		return nil, nil, false
	}
	if _, err := f.ReadAt(foot[:], size-seekFooterLen); err != nil {
		return nil, nil, false
	}
	n := int64(binary.LittleEndian.Uint32(foot[0:]))
	if binary.LittleEndian.Uint32(foot[5:]) != seekableMagic || foot[4] != 0 || n == 0 || n > seekableMaxFrames {
		return nil, nil, false
	}
	tableLen := n*seekEntryLen + seekFooterLen
	if size < tableLen+8 {
		return nil, nil, false
	}
	b := make([]byte, 8+n*seekEntryLen)
	if _, err := f.ReadAt(b, size-tableLen-8); err != nil {
		return nil, nil, false
	}
	if binary.LittleEndian.Uint32(b) != skippableMagic || int64(binary.LittleEndian.Uint32(b[4:])) != tableLen {
		return nil, nil, false
	}
	c, d = make([]int64, n+1), make([]int64, n+1)
	for k := int64(0); k < n; k++ {
		e := b[8+k*seekEntryLen:]
		c[k+1] = c[k] + int64(binary.LittleEndian.Uint32(e))
		d[k+1] = d[k] + int64(binary.LittleEndian.Uint32(e[4:]))
	}
	if c[n] != size-tableLen-8 {
		return nil, nil, false
	}
	return c, d, true
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// File is a dump file opened for reading: Read gives its decompressed
// bytes whatever its compression.
type File struct {
	// Compression is the file's, told by its first bytes.
	Compression Compression
	f           *os.File
	r           io.Reader
	closeDec    func()
	at          int64 // the decompressed offset r starts at (From)
}

// Open opens the dump file at path, plain or compressed (zstd or gzip,
// told by its magic bytes, not by its name): every reader of dump files
// opens them here. A compressed stream cut short is an error of Read (a
// dump is never read as a shorter heap).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	df, err := newFile(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return df, nil
}

// newFile starts reading f from its beginning.
func newFile(f *os.File, path string) (*File, error) {
	br := bufio.NewReaderSize(f, 1<<20)
	head, _ := br.Peek(4)
	df := &File{Compression: Sniff(head), f: f, r: br}
	switch df.Compression {
	case Zstd:
		// Two blocks in flight: one decoded ahead while the reader parses
		// the last (the machines rbscope runs on may have two cores).
		d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(2))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		df.r, df.closeDec = &decodeErrs{r: d, name: "zstd"}, d.Close
	case Gzip:
		z, err := gzip.NewReader(br)
		if err != nil {
			// Told at the first Read, as errors of the stream after it.
			df.r = errReader{decodeErr("gzip", err)}
			break
		}
		df.r, df.closeDec = &decodeErrs{r: z, name: "gzip"}, func() { z.Close() }
	}
	return df, nil
}

// Read reads the dump's decompressed bytes.
func (f *File) Read(p []byte) (int, error) { return f.r.Read(p) }

// Close closes the file.
func (f *File) Close() error {
	if f.closeDec != nil {
		f.closeDec()
	}
	return f.f.Close()
}

// Stat returns the file's FileInfo (of the file as stored: its compressed
// size).
func (f *File) Stat() (os.FileInfo, error) { return f.f.Stat() }

// Rewind starts reading the file again from its beginning.
func (f *File) Rewind() error {
	if f.closeDec != nil {
		f.closeDec()
		f.closeDec = nil
	}
	if _, err := f.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	df, err := newFile(f.f, f.f.Name())
	if err != nil {
		return err
	}
	*f = *df
	return nil
}

// From returns a reader of the dump's decompressed bytes from offset off
// on (an offset of Reader.Offset). A plain file is read there at once; a
// zstd file rbscope wrote is decompressed from the frame that holds off
// (at most zstdFrame bytes before it); any other compressed file is
// decompressed from its beginning up to off, a cost that grows with off.
func (f *File) From(off int64) (io.Reader, error) {
	if f.Compression == Plain {
		return io.NewSectionReader(f.f, off, 1<<62-off), nil
	}
	if err := f.fromFrame(off); err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, f, off-f.at); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%s: no line at offset %d, past the end: the dump changed", f.f.Name(), off)
		}
		return nil, err
	}
	return f, nil
}

// fromFrame starts reading the file again from the start of the zstd
// frame that holds decompressed offset off when its seek table says
// where (f.at is that frame's offset), else from its beginning (f.at 0).
func (f *File) fromFrame(off int64) error {
	if f.Compression == Zstd {
		fi, err := f.f.Stat()
		if err != nil {
			return err
		}
		if c, d, ok := seekTable(f.f, fi.Size()); ok {
			k, _ := slices.BinarySearch(d, off+1)
			k = max(k-1, 0)
			if k < len(d)-1 {
				dec, err := zstd.NewReader(io.NewSectionReader(f.f, c[k], c[len(c)-1]-c[k]), zstd.WithDecoderConcurrency(1))
				if err != nil {
					return err
				}
				if f.closeDec != nil {
					f.closeDec()
				}
				f.r, f.closeDec, f.at = &decodeErrs{r: dec, name: "zstd"}, dec.Close, d[k]
				return nil
			}
		}
	}
	f.at = 0
	return f.Rewind()
}

// ErrCutShort is the error of a compressed dump whose stream stops
// before its end.
var ErrCutShort = errors.New("cut short")

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// decodeErrs turns a decompressor's errors into ones that say what is
// wrong with the file in one line.
type decodeErrs struct {
	r    io.Reader
	name string
}

func (d *decodeErrs) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = decodeErr(d.name, err)
	}
	return n, err
}

// decodeErr says what the decompressor of compression name found.
func decodeErr(name string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the %s stream is %w (a copy that stopped early, or a full disk): dump the process again", name, ErrCutShort)
	}
	return fmt.Errorf("a damaged %s stream: %w", name, err)
}
