package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/crashreport"
	"github.com/rbscope/rbscope/internal/stacks"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/unwind"
)

// NewCrashReport maps a crash's report to its document.
func NewCrashReport(r *crashreport.Report) *CrashReport {
	d := &CrashReport{ID: r.ID, Time: r.Time, PID: r.PID, TID: r.TID, UID: r.UID, Signal: r.Signal, SignalName: r.SignalName,
		Exe: r.Exe, Cmdline: r.Cmdline, Fault: r.Fault, Problems: r.Problems, HandledIn: r.HandledIn.String(),
		Proc: CrashProc{Maps: r.Proc.Maps, Status: r.Proc.Status, Limits: r.Proc.Limits, FDs: r.Proc.FDs, Cgroup: r.Proc.Cgroup,
			Cwd: r.Proc.Cwd, Environ: r.Proc.Environ},
		Core: CrashCore{File: r.Core.File, Bytes: r.Core.Bytes, Stored: r.Core.Stored, Truncated: r.Core.Truncated,
			NotStored: r.Core.NotStored, ChainedTo: r.Core.ChainedTo, ChainError: r.Core.ChainError},
	}
	if r.Registers != nil && r.Registers.Arch != nil {
		d.Registers = map[string]string{}
		names := r.Registers.Names()
		for i, v := range r.Registers.Values() {
			d.Registers[names[i]] = hex(v)
		}
	}
	for _, nt := range r.Native {
		w := CrashNativeThread{TID: nt.TID, PC: hex(nt.PC), SP: hex(nt.SP), Error: nt.Error}
		if nt.Frames != nil {
			w.Frames = make([]NativeFrame, len(nt.Frames))
			for i, f := range nt.Frames {
				w.Frames[i] = NewNativeFrame(f)
			}
		}
		d.Native = append(d.Native, w)
	}
	if r.Ruby != nil {
		d.Ruby = &CrashRuby{Version: r.Ruby.Version, Threads: Threads(r.Ruby.Threads)}
	}
	for _, n := range r.Notified {
		d.Notified = append(d.Notified, CrashNotification{Kind: n.Kind, To: n.To, OK: n.OK, Error: n.Error})
	}
	return d
}

// EncodeCrashReport is a report's document as report.json holds it and
// the webhook sends it: indented JSON, schema_version first.
func EncodeCrashReport(r *crashreport.Report) ([]byte, error) {
	var b bytes.Buffer
	if err := Write(&b, NewCrashReport(r)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadCrashReport decodes a stored report.json. A report without
// schema_version was written before version 2, with native frames spelled
// addr, symbol (function+offset or object+offset) and file (the object);
// it is read as such. A report of a newer version is refused.
func ReadCrashReport(b []byte) (*crashreport.Report, error) {
	var head struct {
		SchemaVersion int `json:"schema_version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("not a crash report: %w", err)
	}
	if head.SchemaVersion > SchemaVersion {
		return nil, fmt.Errorf("a report of schema version %d, newer than this rbscope's %d", head.SchemaVersion, SchemaVersion)
	}
	var d CrashReport
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("not a crash report: %w", err)
	}
	if head.SchemaVersion < 2 {
		if err := readV1NativeFrames(b, &d); err != nil {
			return nil, fmt.Errorf("not a crash report of schema version 1: %w", err)
		}
	}
	return d.report(), nil
}

// readV1NativeFrames reads the native frames of a report written before
// schema version 2 into d, in the current spelling.
func readV1NativeFrames(b []byte, d *CrashReport) error {
	var v1 struct {
		Native []struct {
			Frames []struct {
				Addr   string `json:"addr"`
				Symbol string `json:"symbol"`
				File   string `json:"file"` // the object file
			} `json:"frames"`
		} `json:"native_threads"`
	}
	if err := json.Unmarshal(b, &v1); err != nil {
		return err
	}
	for i, nt := range v1.Native {
		if i >= len(d.Native) {
			break
		}
		for j, f := range nt.Frames {
			if j >= len(d.Native[i].Frames) {
				break
			}
			n := &d.Native[i].Frames[j]
			n.PC, n.Object, n.File, n.Line = f.Addr, f.File, "", 0
			name, off, hasOff := f.Symbol, "", false
			if k := strings.LastIndex(f.Symbol, "+0x"); k >= 0 {
				name, off, hasOff = f.Symbol[:k], f.Symbol[k+1:], true
			}
			switch {
			case strings.HasPrefix(f.File, "["):
				// "[jit]", "[vdso]": named by the object alone.
			case hasOff && name == filepath.Base(f.File):
				n.Offset = off
			case hasOff:
				n.Function, n.FunctionOffset = name, off
			default:
				n.Function = f.Symbol
			}
		}
	}
	return nil
}

// report maps a report's document back to the model.
func (d *CrashReport) report() *crashreport.Report {
	handled, _ := time.ParseDuration(d.HandledIn)
	r := &crashreport.Report{ID: d.ID, Time: d.Time, PID: d.PID, TID: d.TID, UID: d.UID, Signal: d.Signal, SignalName: d.SignalName,
		Exe: d.Exe, Cmdline: d.Cmdline, Fault: d.Fault, Problems: d.Problems, HandledIn: handled,
		Proc: crashreport.Proc{Maps: d.Proc.Maps, Status: d.Proc.Status, Limits: d.Proc.Limits, FDs: d.Proc.FDs, Cgroup: d.Proc.Cgroup,
			Cwd: d.Proc.Cwd, Environ: d.Proc.Environ},
		Core: crashreport.Core{File: d.Core.File, Bytes: d.Core.Bytes, Stored: d.Core.Stored, Truncated: d.Core.Truncated,
			NotStored: d.Core.NotStored, ChainedTo: d.Core.ChainedTo, ChainError: d.Core.ChainError},
		Registers: registers(d.Registers),
	}
	for _, w := range d.Native {
		nt := crashreport.NativeThread{TID: w.TID, PC: unhex(w.PC), SP: unhex(w.SP), Error: w.Error}
		if w.Frames != nil {
			nt.Frames = make([]unwind.Frame, len(w.Frames))
			for i, f := range w.Frames {
				nt.Frames[i] = f.frame()
			}
		}
		r.Native = append(r.Native, nt)
	}
	if d.Ruby != nil {
		r.Ruby = &crashreport.Ruby{Version: d.Ruby.Version, Threads: make([]stacks.Thread, len(d.Ruby.Threads))}
		for i, w := range d.Ruby.Threads {
			th := stacks.Thread{TID: w.TID, Name: w.Name, Ruby: true, Main: w.Main, Status: w.Status, GVL: w.GVL, Error: w.Error,
				Wait: w.Wait.wait(), Held: held(w.Holds)}
			if w.Frames != nil {
				th.Frames = make([]stacks.Frame, len(w.Frames))
				for j, f := range w.Frames {
					th.Frames[j] = stacks.Frame{Kind: stacks.Kind(f.Kind), Label: f.Label, BaseLabel: f.BaseLabel, Path: f.Path, Line: f.Line}
				}
			}
			r.Ruby.Threads[i] = th
		}
	}
	for _, n := range d.Notified {
		r.Notified = append(r.Notified, crashreport.Notification{Kind: n.Kind, To: n.To, OK: n.OK, Error: n.Error})
	}
	return r
}

// registers reads a report's registers back: the architecture whose
// first register the map names, each register by its name. nil when no
// architecture matches.
func registers(m map[string]string) *target.Regs {
	for _, a := range arch.All {
		if _, ok := m[a.Regs[0]]; !ok {
			continue
		}
		r := &target.Regs{Arch: a, V: make([]uint64, len(a.Regs))}
		for i, name := range a.Regs {
			r.V[i] = unhex(m[name])
		}
		if a.TPIndex >= 0 {
			r.TP = r.V[a.TPIndex]
		} else {
			r.TP = unhex(m[a.ThreadPointer])
		}
		return r
	}
	return nil
}

// NewCrashList maps the store's crashes to crash list's document: a row
// per crash, a crash whose report could not be read saying why in its
// signal.
func NewCrashList(entries []crashreport.Entry) *CrashList {
	doc := &CrashList{Crashes: []CrashListRow{}}
	for _, e := range entries {
		r := e.Report
		if r == nil {
			doc.Crashes = append(doc.Crashes, CrashListRow{ID: e.ID, Signal: "(no report: " + e.Err.Error() + ")"})
			continue
		}
		doc.Crashes = append(doc.Crashes, CrashListRow{ID: e.ID, Time: r.Time.UTC().Format(time.RFC3339), PID: r.PID, Exe: r.Exe,
			Signal: r.SignalName, TopRubyFrame: r.TopRubyFrame()})
	}
	return doc
}
