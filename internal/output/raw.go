package output

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/ctxlabels"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/wire"
)

// Raw writes every sample of p, gzipped, one JSON value per line (a
// wire.RawHeader, then records named wire.RawFrame, wire.RawStack...), so
// that `rbscope report` can render it in any format later:
//
//	{"format":"rbscope-raw","version":1,"rate":100,"start_ns":...,...}  header
//	["f","ruby","Object#work","app.rb",3]   frame N (numbered from 0 in order)
//	["s",[0,1]]                             stack N: frame numbers, root first
//	["th",4242,4243,"worker"]               thread N: pid, tid, name
//	["t",1250000,0,1]                       a sample: ns since start, thread, stack
//	["n",1,7]                               samples without time: stack, count
//
// A frame, stack or thread line comes before its first use. The samples of
// the timeline (profile.Profile.Timeline) are "t" lines in the order
// taken; samples not in it (a profile recorded without a timeline) are "n"
// lines.
func Raw(w io.Writer, p *profile.Profile, o Options) error {
	zw := gzip.NewWriter(w)
	bw := bufio.NewWriter(zw)
	enc := json.NewEncoder(bw)
	h := wire.RawHeader{Format: wire.RawFormat, Version: wire.RawVersion, Title: o.Title, Rate: p.Rate, StartNs: p.Start.UnixNano(),
		DurationNs: int64(p.Duration), Ticks: p.Ticks, Errors: p.Errors, Waiting: p.Waiting, Samples: p.Samples, Timeline: p.Timeline != nil,
		Labels: rawLabels(p)}
	if err := enc.Encode(h); err != nil {
		return err
	}
	for _, f := range p.Frames {
		if err := enc.Encode([]any{wire.RawFrame, f.Kind, f.Label, f.Path, f.Line}); err != nil {
			return err
		}
	}
	for _, st := range p.Stacks {
		if err := enc.Encode([]any{wire.RawStack, st.Frames}); err != nil {
			return err
		}
	}
	type thread struct {
		pid, tid int
		name     string
	}
	threads := map[thread]int{}
	timed := make([]int, len(p.Stacks))
	for _, s := range p.Timeline {
		th := thread{s.PID, s.TID, s.Thread}
		id, ok := threads[th]
		if !ok {
			id = len(threads)
			threads[th] = id
			if err := enc.Encode([]any{wire.RawThread, s.PID, s.TID, s.Thread}); err != nil {
				return err
			}
		}
		if err := enc.Encode([]any{wire.RawSample, int64(s.Time), id, s.Stack}); err != nil {
			return err
		}
		timed[s.Stack]++
	}
	for si, st := range p.Stacks {
		if n := st.Count - timed[si]; n > 0 {
			if err := enc.Encode([]any{wire.RawCount, si, n}); err != nil {
				return err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// RawHead tells whether head, the first bytes of a file once
// decompressed, begin a recording that Raw wrote (its header's first key).
func RawHead(head []byte) bool {
	return bytes.HasPrefix(head, []byte(`{"format":"`+wire.RawFormat+`"`))
}

// rawLabels are the labels of p's stacks as a raw recording's header keeps
// them: each distinct set once (stacks of one context share one slice).
func rawLabels(p *profile.Profile) *wire.RawLabels {
	out := &wire.RawLabels{Sets: []map[string]string{}, Stacks: [][2]int{}}
	sets := map[string]int{}
	for si, st := range p.Stacks {
		if len(st.Labels) == 0 {
			continue
		}
		var key strings.Builder
		set := make(map[string]string, len(st.Labels))
		for _, l := range st.Labels {
			set[l.Key] = l.Value
			fmt.Fprintf(&key, "%q=%q;", l.Key, l.Value)
		}
		n, ok := sets[key.String()]
		if !ok {
			n = len(out.Sets)
			sets[key.String()] = n
			out.Sets = append(out.Sets, set)
		}
		out.Stacks = append(out.Stacks, [2]int{si, n})
	}
	return out
}

// ReadRaw reads a recording that Raw wrote. The file is checked as it is
// read: a malformed line is reported with its number, and a reference to a
// frame, stack or thread not yet defined is refused. The stacks get the
// labels the header keeps; a recording made before labels were kept gets
// those ctxlabels derives from its frames (all but Sinatra's routes, whose
// method names such a recording lacks).
func ReadRaw(r io.Reader) (*profile.Profile, string, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, "", fmt.Errorf("not a raw rbscope recording (not gzip): %w", err)
	}
	defer zr.Close()
	dec := json.NewDecoder(bufio.NewReader(zr))
	var h wire.RawHeader
	if err := dec.Decode(&h); err != nil || h.Format != wire.RawFormat {
		return nil, "", errors.New("not a raw rbscope recording (no rbscope-raw header)")
	}
	if h.Version < 1 || h.Version > wire.RawVersion {
		return nil, "", fmt.Errorf("raw recording version %d: this rbscope reads versions 1 to %d", h.Version, wire.RawVersion)
	}
	if !(h.Rate > 0 && h.Rate <= 1e6) || h.DurationNs < 0 || h.Ticks < 0 || h.Errors < 0 {
		return nil, "", fmt.Errorf("raw recording header is damaged (rate %v, duration %d ns, ticks %d, errors %d)", h.Rate, h.DurationNs, h.Ticks, h.Errors)
	}
	p := profile.NewProfile(h.Rate)
	p.Start = time.Unix(0, h.StartNs)
	p.Duration = time.Duration(h.DurationNs)
	p.Ticks, p.Errors, p.Waiting = h.Ticks, h.Errors, h.Waiting
	if h.Timeline {
		p.KeepTimeline()
	}
	var frames []profile.Frame
	var stacks [][]profile.Frame
	type thread struct {
		pid, tid int
		name     string
	}
	var threads []thread
	var moved []int // a stack's number in the file -> its index in p, -1: unused
	for n := 2; ; n++ {
		var rec []json.RawMessage
		if err := dec.Decode(&rec); err == io.EOF {
			break
		} else if err != nil {
			return nil, "", fmt.Errorf("raw recording, value %d: %w", n, err)
		}
		bad := func(err error) error { return fmt.Errorf("raw recording, value %d: %w", n, err) }
		var kind string
		if len(rec) == 0 || json.Unmarshal(rec[0], &kind) != nil {
			return nil, "", bad(errors.New("not a record"))
		}
		args := func(want int, into ...any) error {
			if len(rec) != want+1 {
				return fmt.Errorf("%q record with %d fields, want %d", kind, len(rec)-1, want)
			}
			for i, v := range into {
				if err := json.Unmarshal(rec[i+1], v); err != nil {
					return fmt.Errorf("%q record field %d: %w", kind, i+1, err)
				}
			}
			return nil
		}
		switch kind {
		case wire.RawFrame:
			var f profile.Frame
			if err := args(4, &f.Kind, &f.Label, &f.Path, &f.Line); err != nil {
				return nil, "", bad(err)
			}
			frames = append(frames, f)
		case wire.RawStack:
			var ids []int
			if err := args(1, &ids); err != nil {
				return nil, "", bad(err)
			}
			st := make([]profile.Frame, len(ids))
			for i, id := range ids {
				if id < 0 || id >= len(frames) {
					return nil, "", bad(fmt.Errorf("stack refers to frame %d of %d", id, len(frames)))
				}
				st[i] = frames[id]
			}
			stacks = append(stacks, st)
			moved = append(moved, -1)
		case wire.RawThread:
			var th thread
			if err := args(3, &th.pid, &th.tid, &th.name); err != nil {
				return nil, "", bad(err)
			}
			threads = append(threads, th)
		case wire.RawSample:
			var ns int64
			var ti, si int
			if err := args(3, &ns, &ti, &si); err != nil {
				return nil, "", bad(err)
			}
			if ti < 0 || ti >= len(threads) || si < 0 || si >= len(stacks) {
				return nil, "", bad(fmt.Errorf("sample refers to thread %d of %d, stack %d of %d", ti, len(threads), si, len(stacks)))
			}
			th := threads[ti]
			if moved[si] < 0 {
				moved[si] = p.AddSample(stacks[si], p.Start.Add(time.Duration(ns)), th.pid, th.tid, th.name)
			} else {
				p.AddStackSample(moved[si], p.Start.Add(time.Duration(ns)), th.pid, th.tid, th.name)
			}
		case wire.RawCount:
			var si, count int
			if err := args(2, &si, &count); err != nil {
				return nil, "", bad(err)
			}
			if si < 0 || si >= len(stacks) || count < 1 {
				return nil, "", bad(fmt.Errorf("%d samples of stack %d of %d", count, si, len(stacks)))
			}
			moved[si] = p.Add(stacks[si], count)
		default:
			return nil, "", bad(fmt.Errorf("unknown record %q", kind))
		}
	}
	if p.Samples != h.Samples {
		return nil, "", fmt.Errorf("raw recording is truncated or damaged: %d samples, its header says %d", p.Samples, h.Samples)
	}
	if h.Labels == nil {
		ctxlabels.Annotate(p, nil)
		return p, h.Title, nil
	}
	for _, sl := range h.Labels.Stacks {
		si, set := sl[0], sl[1]
		if si < 0 || si >= len(stacks) || set < 0 || set >= len(h.Labels.Sets) {
			return nil, "", fmt.Errorf("raw recording header is damaged: labels of stack %d of %d, set %d of %d", si, len(stacks), set, len(h.Labels.Sets))
		}
		if moved[si] < 0 {
			continue // a stack without samples
		}
		var ls []profile.Label
		for _, k := range slices.Sorted(maps.Keys(h.Labels.Sets[set])) {
			ls = append(ls, profile.Label{Key: k, Value: h.Labels.Sets[set][k]})
		}
		p.Stacks[moved[si]].Labels = ls
	}
	return p, h.Title, nil
}
