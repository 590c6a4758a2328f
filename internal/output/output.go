// Package output writes profiles in the formats people read them with,
// all of them in one table (formats): flame graph SVG, speedscope JSON,
// pprof protobuf, collapsed stacks, callgrind, the Firefox Profiler's
// processed profile, text summaries (by function and by line) and
// rbscope's own raw recording, which `rbscope report` reads back.
package output

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/tempfiles"
	"github.com/rbscope/rbscope/internal/textsafe"
)

// Options tune what the writers show.
type Options struct {
	// Lines keeps line numbers in frame names (flamegraph, collapsed).
	Lines bool
	// Title heads the flame graph and names the speedscope profile.
	Title string
	// Icicle draws the flame graph upside down: the roots at the top,
	// callees below their callers.
	Icicle bool
	// Baseline, when set, makes the flame graph differential: each frame
	// is coloured by how its share of the samples changed against the
	// same stack's in Baseline (red: more, blue: less). The stack chart
	// colours each box so by its function's share (TotalShares) instead:
	// its boxes are runs of time, not stacks.
	Baseline *profile.Profile
	// From and To bound the time the stack chart draws, since the
	// recording began (To 0: to its last sample).
	From, To time.Duration
}

// Format is one output format: its name (--format), its usual file
// extension and its writer.
type Format struct {
	Name string
	Ext  string
	// Help says in a few words what the format is for.
	Help string
	// Timeline is set when the writer needs every sample's time and
	// thread (profile.Profile.Timeline), not only the aggregate.
	Timeline bool
	Write    func(w io.Writer, p *profile.Profile, o Options) error
}

// formats is every output format, the default first. It is the one place
// a format is looked up by name.
var formats = []Format{
	{Name: "flamegraph", Ext: ".svg", Help: "interactive SVG flame graph", Write: Flamegraph},
	{Name: "speedscope", Ext: ".speedscope.json", Help: "speedscope JSON", Write: Speedscope},
	{Name: "pprof", Ext: ".pb.gz", Help: "gzipped pprof protobuf for go tool pprof", Write: func(w io.Writer, p *profile.Profile, _ Options) error { return Pprof(w, p) }},
	{Name: "collapsed", Ext: ".txt", Help: "folded stacks, root;...;leaf count", Write: Collapsed},
	{Name: "summary", Ext: ".summary.txt", Help: "functions by self and total %", Write: func(w io.Writer, p *profile.Profile, _ Options) error { return Summary(w, p) }},
	{Name: "summary-by-line", Ext: ".by-line.txt", Help: "file:line by self and total %", Write: func(w io.Writer, p *profile.Profile, _ Options) error { return SummaryByLine(w, p) }},
	{Name: "callgrind", Ext: ".callgrind", Help: "callgrind format for kcachegrind and callgrind_annotate", Write: Callgrind},
	{Name: "raw", Ext: ".raw.gz", Help: "every sample with its time and thread, for rbscope report", Timeline: true, Write: Raw},
	{Name: "firefox", Ext: ".firefox.json", Help: "Firefox Profiler processed profile, a track per thread", Timeline: true, Write: Firefox},
}

// Names returns the formats' names, for flags' help and errors.
func Names() []string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Name
	}
	return names
}

// Lookup returns the format called name.
func Lookup(name string) (Format, error) {
	for _, f := range formats {
		if f.Name == name {
			return f, nil
		}
	}
	return Format{}, fmt.Errorf("--format %q is not one of %s", name, strings.Join(Names(), ", "))
}

// Write writes p in the named format.
func Write(w io.Writer, format string, p *profile.Profile, o Options) error {
	f, err := Lookup(format)
	if err != nil {
		return err
	}
	return f.Write(w, p, o)
}

// File is an output file that appears under its name only once complete:
// it is created (so an unwritable path fails early) as a temporary file in
// the same directory and renamed into place by Commit. It is readable by
// its owner only (0600): profiles and heap dumps hold the target's memory
// (every String of a heap dump), which other users may not read.
//
// A path that names a device, a FIFO or a socket (-o /dev/null, a named
// pipe to another program) is written to as it is: renaming a file over
// it would replace the device itself, /dev/null included when rbscope
// runs as root.
type File struct {
	*os.File
	path   string
	direct bool // written in place: not a regular file
}

// Create prepares path for writing.
func Create(path string) (*File, error) {
	dir := filepath.Dir(path)
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return nil, fmt.Errorf("cannot write %s: it is a directory", path)
	} else if err == nil && !st.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("cannot write %s: %w", path, unwrapPathError(err))
		}
		return &File{File: f, path: path, direct: true}, nil
	}
	sweepStale(dir, "."+filepath.Base(path)+".tmp-")
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", path, unwrapPathError(err))
	}
	tempfiles.Add(f.Name())
	return &File{File: f, path: path}, nil
}

// staleAfter is how long a temporary output must have gone unwritten
// before another rbscope writing the same output removes it: one left by
// an rbscope killed outright (SIGKILL) in the middle of a heap dump would
// otherwise stay, as large as the dump. One being written is fresher.
const staleAfter = 10 * time.Minute

// sweepStale removes regular files in dir named prefix* that nothing has
// written for staleAfter.
func sweepStale(dir, prefix string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleAfter {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// Commit closes the file and moves it into place.
func (f *File) Commit() error {
	if f.direct {
		if err := f.File.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", f.path, err)
		}
		return nil
	}
	defer tempfiles.Forget(f.File.Name())
	if err := f.File.Close(); err != nil {
		os.Remove(f.File.Name())
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	if err := os.Chmod(f.File.Name(), 0o600); err != nil {
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
	if f.direct {
		return
	}
	os.Remove(f.File.Name())
	tempfiles.Forget(f.File.Name())
}

// Collapsed writes "root;...;leaf count" lines (Brendan Gregg's folded
// format), one per distinct stack, sorted.
func Collapsed(w io.Writer, p *profile.Profile, o Options) error {
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
func Summary(w io.Writer, p *profile.Profile) error {
	bw := &errWriter{w: w}
	bw.printf("%s", summaryHeader(p))
	if bw.err != nil {
		return bw.err
	}
	_, err := FunctionTable(w, p, TableOptions{})
	return err
}

// TableOptions shape FunctionTable's output.
type TableOptions struct {
	// MaxRows caps the functions shown (0: all).
	MaxRows int
	// Width cuts longer lines (0: none).
	Width int
	// Newline ends each line ("\n" when empty; top's raw terminal needs
	// "\r\n").
	Newline string
}

// FunctionTable writes the per-function table that summary and top show:
// a header, then one row per function (profile.Profile.Functions) with its
// self and total share of the samples and counts. It returns how many
// functions it showed.
func FunctionTable(w io.Writer, p *profile.Profile, o TableOptions) (int, error) {
	nl := o.Newline
	if nl == "" {
		nl = "\n"
	}
	bw := &errWriter{w: w}
	line := func(s string) {
		if r := []rune(s); o.Width > 0 && len(r) > o.Width {
			s = string(r[:o.Width])
		}
		bw.printf("%s%s", s, nl)
	}
	line(fmt.Sprintf("%7s %7s %8s %8s  %s", "self%", "total%", "self", "total", "function"))
	n := 0
	for _, s := range p.Functions() {
		if o.MaxRows > 0 && n >= o.MaxRows {
			break
		}
		line(fmt.Sprintf("%6.2f%% %6.2f%% %8d %8d  %s", Pct(s.Self, p.Samples), Pct(s.Total, p.Samples), s.Self, s.Total, textsafe.Clean(s.Frame.Name(false))))
		n++
	}
	return n, bw.err
}

// summaryHeader is what summary and summary-by-line print above their
// table: the counts, the Breakdown, and an empty line.
func summaryHeader(p *profile.Profile) string {
	return fmt.Sprintf("%d samples in %.1fs at %g Hz (%d ticks, %d errors)\n%s\n\n", p.Samples, p.Duration.Seconds(), p.Rate, p.Ticks, p.Errors, Breakdown(p))
}

// Breakdown is the line summary and top show under their header: the
// share of samples taken while the GC ran and of those waiting for the GVL
// (profile.Profile.Breakdown).
func Breakdown(p *profile.Profile) string {
	gc, gvl := p.Breakdown()
	return fmt.Sprintf("GC %.1f%%, waiting for GVL %.1f%% of samples", Pct(gc, p.Samples), Pct(gvl, p.Samples))
}

// Pct is n as a percentage of total (0 when total is 0).
func Pct(n, total int) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(n) / float64(total)
}
