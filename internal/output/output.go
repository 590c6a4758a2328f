// Package output writes profiles in the formats people read them with:
// flame graph SVG, speedscope JSON, pprof protobuf, collapsed stacks and a
// text summary.
package output

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/sampler"
)

// Formats lists the names Write accepts.
var Formats = []string{"flamegraph", "speedscope", "pprof", "collapsed", "summary"}

// Options tune what the writers show.
type Options struct {
	// Lines keeps line numbers in frame names (flamegraph, collapsed).
	Lines bool
	// Title heads the flame graph and names the speedscope profile.
	Title string
}

// Extension returns the usual file extension of a format.
func Extension(format string) string {
	switch format {
	case "flamegraph":
		return ".svg"
	case "speedscope":
		return ".speedscope.json"
	case "pprof":
		return ".pb.gz"
	case "collapsed":
		return ".txt"
	case "summary":
		return ".summary.txt"
	}
	return ""
}

// Write writes p in the named format.
func Write(w io.Writer, format string, p *sampler.Profile, o Options) error {
	switch format {
	case "flamegraph":
		return Flamegraph(w, p, o)
	case "speedscope":
		return Speedscope(w, p, o)
	case "pprof":
		return Pprof(w, p)
	case "collapsed":
		return Collapsed(w, p, o)
	case "summary":
		return Summary(w, p)
	}
	return fmt.Errorf("unknown format %q (one of %s)", format, strings.Join(Formats, ", "))
}

// File is an output file that appears under its name only once complete:
// it is created (so an unwritable path fails early) as a temporary file in
// the same directory and renamed into place by Commit.
type File struct {
	*os.File
	path string
}

// Create prepares path for writing.
func Create(path string) (*File, error) {
	dir := filepath.Dir(path)
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, fmt.Errorf("cannot write %s: it is a directory", path)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, unwrapPathError(err))
	}
	return &File{File: f, path: path}, nil
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// Commit closes the file and moves it into place.
func (f *File) Commit() error {
	if err := f.File.Close(); err != nil {
		os.Remove(f.File.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if err := os.Chmod(f.File.Name(), 0o644); err != nil {
		os.Remove(f.File.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if err := os.Rename(f.File.Name(), f.path); err != nil {
		os.Remove(f.File.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return nil
}

// Abort removes the temporary file.
func (f *File) Abort() {
	f.File.Close()
	os.Remove(f.File.Name())
}

// Collapsed writes "root;...;leaf count" lines (Brendan Gregg's folded
// format), one per distinct stack, sorted.
func Collapsed(w io.Writer, p *sampler.Profile, o Options) error {
	lines := make([]string, 0, len(p.Stacks))
	for _, st := range p.Stacks {
		names := make([]string, len(st.Frames))
		for i, id := range st.Frames {
			names[i] = strings.ReplaceAll(p.Frames[id].Name(o.Lines), ";", ":")
		}
		lines = append(lines, fmt.Sprintf("%s %d", strings.Join(names, ";"), st.Count))
	}
	sort.Strings(lines)
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// Summary writes a table of functions by self and total share of samples.
func Summary(w io.Writer, p *sampler.Profile) error {
	stats := p.Functions()
	bw := &errWriter{w: w}
	bw.printf("%d samples in %.1fs at %g Hz (%d ticks, %d errors)\n\n", p.Samples, p.Duration.Seconds(), p.Rate, p.Ticks, p.Errors)
	bw.printf("%7s %7s %8s %8s  %s\n", "self%", "total%", "self", "total", "function")
	for _, s := range stats {
		bw.printf("%6.2f%% %6.2f%% %8d %8d  %s\n", pct(s.Self, p.Samples), pct(s.Total, p.Samples), s.Self, s.Total, s.Frame.Name(false))
	}
	return bw.err
}

func pct(n, total int) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(total)
}
