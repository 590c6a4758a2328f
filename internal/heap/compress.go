package heap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

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

// ZstdLevel is the zstd level dumps are written at: the fastest, which
// keeps heap dump within a fifth of a plain dump's time on two cores
// (docs/usage.md has the figures); the default level took longer.
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
		return zstd.NewWriter(w, zstd.WithEncoderLevel(ZstdLevel), zstd.WithEncoderConcurrency(min(2, runtime.GOMAXPROCS(0))))
	case Gzip:
		return gzip.NewWriterLevel(w, GzipLevel)
	}
	return nopCloser{w}, nil
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
// compressed one is decompressed from its beginning up to off: its cost
// grows with off.
func (f *File) From(off int64) (io.Reader, error) {
	if f.Compression == Plain {
		return io.NewSectionReader(f.f, off, 1<<62-off), nil
	}
	if err := f.Rewind(); err != nil {
		return nil, err
	}
	if n, err := io.CopyN(io.Discard, f, off); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%s: %d bytes when decompressed, no line at offset %d: the dump changed", f.f.Name(), n, off)
		}
		return nil, err
	}
	return f, nil
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
