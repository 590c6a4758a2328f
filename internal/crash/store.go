package crash

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/textsafe"
	"github.com/rbscope/rbscope/internal/wire"
)

// List returns the crash IDs in the store, oldest first. Entries that are
// not plain directories (a planted symbolic link) are ignored.
func List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.Type().IsDir() && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids) // IDs start with a UTC time stamp
	return ids, nil
}

// Load reads one crash's report (written by this version or an earlier
// one: wire.ReadCrashReport).
func Load(dir, id string) (*crashreport.Report, error) {
	if strings.ContainsAny(id, "/\\") || id == ".." || id == "." {
		return nil, fmt.Errorf("bad crash id %q", id)
	}
	p := filepath.Join(dir, id, "report.json")
	st, err := os.Lstat(filepath.Join(dir, id))
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("no crash %q in %s (see 'rbscope crash list')", id, dir)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("crash %s has no report yet: %w", id, err)
	}
	r, err := wire.ReadCrashReport(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return r, nil
}

// ListReports reads the store's crashes, oldest first: each one's report,
// or why it could not be read (wire.NewCrashList makes crash list's
// document of them).
func ListReports(dir string) ([]crashreport.Entry, error) {
	ids, err := List(dir)
	if err != nil {
		return nil, err
	}
	entries := make([]crashreport.Entry, 0, len(ids))
	for _, id := range ids {
		r, err := Load(dir, id)
		entries = append(entries, crashreport.Entry{ID: id, Report: r, Err: err})
	}
	return entries, nil
}

// rotate removes the oldest crashes of user uid so that at most keep of
// them remain (one user's crashes cannot rotate away another's), and the
// oldest of anyone's beyond rotateAllFactor times keep.
func rotate(dir string, keep int, uid int64) {
	ids, err := List(dir)
	if err != nil || keep < 0 {
		return
	}
	var mine []string
	for _, id := range ids {
		if u, ok := reportUID(dir, id); ok && u == uid {
			mine = append(mine, id)
		}
	}
	for len(mine) > keep {
		os.RemoveAll(filepath.Join(dir, mine[0]))
		mine = mine[1:]
	}
	if ids, err = List(dir); err != nil {
		return
	}
	for len(ids) > keep*rotateAllFactor {
		os.RemoveAll(filepath.Join(dir, ids[0]))
		ids = ids[1:]
	}
}

// reportUID reads the uid of a stored report from the head of its
// report.json, where wire.CrashReport puts it, without decoding the rest (the
// stacks can be megabytes, and the handler rotates before every report).
// ok is false for a report that has none there.
func reportUID(dir, id string) (uid int64, ok bool) {
	f, err := os.Open(filepath.Join(dir, id, "report.json"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, 64<<10))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return 0, false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return 0, false
		}
		if key == "uid" {
			return uid, dec.Decode(&uid) == nil
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return 0, false
		}
	}
	return 0, false
}

// rotateAllFactor: the store keeps at most this many times MaxCrashes
// crashes of all users together.
const rotateAllFactor = 8

// cleanArgs joins a command line with its arguments' unprintable bytes
// escaped.
func cleanArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = textsafe.Clean(a)
	}
	return strings.Join(out, " ")
}

// WriteText writes the report for people; everything in it that came from
// the crashed process has its unprintable bytes escaped (textsafe.Clean).
func WriteText(w io.Writer, r *crashreport.Report) {
	fmt.Fprintf(w, "crash %s\n", r.ID)
	fmt.Fprintf(w, "time:    %s\npid:     %d (thread %d)\nsignal:  %s (%d)\nexe:     %s\ncmdline: %s\n",
		r.Time.UTC().Format("2006-01-02 15:04:05 UTC"), r.PID, r.TID, r.SignalName, r.Signal, textsafe.Clean(r.Exe), cleanArgs(r.Cmdline))
	if r.Fault != "" {
		fmt.Fprintf(w, "fault:   %s\n", textsafe.Clean(r.Fault))
	}
	core := "not stored"
	if r.Core.File != "" {
		core = fmt.Sprintf("%s (%d bytes read, %d stored)", r.Core.File, r.Core.Bytes, r.Core.Stored)
		if r.Core.Truncated {
			core += ", TRUNCATED at the size cap"
		}
	}
	if r.Core.NotStored != "" { // why it is missing or cut short
		core += ": " + textsafe.Clean(r.Core.NotStored)
	}
	fmt.Fprintf(w, "core:    %s\n", core)
	if r.Core.ChainedTo != "" {
		fmt.Fprintf(w, "also sent to: %s %s\n", textsafe.Clean(r.Core.ChainedTo), textsafe.Clean(r.Core.ChainError))
	}
	if r.Registers != nil && r.Registers.Arch != nil {
		fmt.Fprintf(w, "\nregisters of thread %d:\n", r.TID)
		values := r.Registers.Values()
		for i, name := range r.Registers.Names() {
			fmt.Fprintf(w, "  %-8s %-18s", name, fmt.Sprintf("%#x", values[i]))
			if i%3 == 2 {
				fmt.Fprintln(w)
			}
		}
		fmt.Fprintln(w)
	}
	if r.Ruby != nil {
		fmt.Fprintf(w, "\nRuby %s threads:\n", r.Ruby.Version)
		for _, th := range r.Ruby.Threads {
			name := th.Name
			if name == "" && th.Main {
				name = "main"
			}
			mark := ""
			if th.TID == r.TID {
				mark = "  <== crashed"
			}
			fmt.Fprintf(w, "Thread %q tid=%d status=%s%s\n", name, th.TID, th.Status, mark)
			for _, l := range stacks.LockLines(th) {
				fmt.Fprintf(w, "  - %s\n", textsafe.Clean(l))
			}
			for _, f := range th.Frames {
				loc := "<cfunc>"
				if f.Kind == stacks.KindRuby {
					loc = fmt.Sprintf("%s:%d", textsafe.Clean(f.Path), f.Line)
				}
				fmt.Fprintf(w, "  %s  %s\n", textsafe.Clean(f.Label), loc)
			}
		}
		for _, d := range stacks.Deadlocks(r.Ruby.Threads) {
			fmt.Fprintln(w, textsafe.Clean(d.String()))
		}
	}
	if len(r.Native) > 0 {
		fmt.Fprintln(w, "\nnative threads (unwound with the code's call frame information):")
		for _, nt := range r.Native {
			fmt.Fprintf(w, "thread %d pc=%#x sp=%#x\n", nt.TID, nt.PC, nt.SP)
			for _, f := range nt.Frames {
				fmt.Fprintf(w, "  %#x %s (%s)", f.PC, textsafe.Clean(f.Name()), textsafe.Clean(filepath.Base(f.Object)))
				if f.Size > 0 {
					fmt.Fprintf(w, " %d B", f.Size)
				}
				if f.Signal != nil {
					fmt.Fprintf(w, "  <- %s at %#x", SignalName(f.Signal.Number), f.Signal.Addr)
				}
				fmt.Fprintln(w)
			}
			if nt.Error != "" {
				fmt.Fprintf(w, "  (unwind stopped: %s)\n", textsafe.Clean(nt.Error))
			}
		}
	}
	for _, n := range r.Notified {
		status := "ok"
		if !n.OK {
			status = "FAILED: " + textsafe.Clean(n.Error)
		}
		fmt.Fprintf(w, "\nnotified %s %s: %s", n.Kind, n.To, status)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "\n\nnot gathered:")
		for _, p := range r.Problems {
			fmt.Fprintln(w, "  "+textsafe.Clean(p))
		}
	}
	fmt.Fprintf(w, "\nhandled in %s\n", r.HandledIn)
}
