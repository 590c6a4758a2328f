package heapfile

import (
	"bufio"
	"fmt"
	"io"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/output"
)

// Out is a dump file being written, compressed as its name asks (.zst,
// .gz: heap.CompressionOf) on the fly, whole or not at all: it appears
// under its name only once Commit has written its end. Every command that
// writes a dump writes it through an Out.
type Out struct {
	// Compression is the file's.
	Compression heap.Compression
	file        *output.File
	counted     *heap.Counter
	z           io.WriteCloser
	bw          *bufio.Writer
	path        string
	done        bool
}

// Create prepares path for a dump: a name that asks for a compression
// rbscope does not write, or a path that cannot be written, is refused
// now, before anything is read.
func Create(path string) (*Out, error) {
	c, err := heap.CompressionOf(path)
	if err != nil {
		return nil, err
	}
	f, err := output.Create(path)
	if err != nil {
		return nil, err
	}
	o := &Out{Compression: c, file: f, counted: &heap.Counter{W: f}, path: path}
	if o.z, err = heap.NewWriter(o.counted, c); err != nil {
		f.Abort()
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	o.bw = bufio.NewWriterSize(o.z, 1<<20)
	return o, nil
}

// Write writes dump bytes (compressed, when the file is).
func (o *Out) Write(p []byte) (int, error) { return o.bw.Write(p) }

// Commit writes what is buffered and the compressed stream's end, and
// moves the file into place.
func (o *Out) Commit() error {
	o.done = true
	err := o.bw.Flush()
	if cerr := o.z.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		o.file.Abort()
		return fmt.Errorf("writing %s: %w", o.path, err)
	}
	return o.file.Commit()
}

// Abort removes the file being written: a no-op after Commit.
func (o *Out) Abort() {
	if o.done {
		return
	}
	o.done = true
	o.z.Close() // stops the encoder's workers; the file goes
	o.file.Abort()
}

// Stored returns how many bytes the file holds so far (after compression).
func (o *Out) Stored() int64 { return o.counted.N }

// Size says how large a dump is: dumped bytes of JSON, stored in the file
// as compression c made them.
func Size(dumped int64, c heap.Compression, stored int64) string {
	if c == heap.Plain {
		return fmt.Sprintf("%d bytes", dumped)
	}
	return fmt.Sprintf("%d bytes, %d as %s (%.1fx smaller)", dumped, stored, c, float64(dumped)/float64(max(stored, 1)))
}
