package output

import (
	"encoding/json"
	"io"
	"sort"
	"strconv"

	"github.com/rbscope/rbscope/internal/profile"
)

// FirefoxProfileVersion is the processed-profile version Firefox writes
// (meta.preprocessedProfileVersion); the Firefox Profiler upgrades older
// versions when it loads them.
const FirefoxProfileVersion = 47

// Firefox profiler categories (meta.categories), by index.
const (
	ffCategoryRuby  = 0
	ffCategoryCFunc = 1
	ffCategoryOther = 2
	ffCategoryGC    = 3
)

type ffFile struct {
	Meta    ffMeta     `json:"meta"`
	Libs    []any      `json:"libs"`
	Threads []ffThread `json:"threads"`
}

type ffMeta struct {
	Interval                   float64      `json:"interval"`  // ms
	StartTime                  float64      `json:"startTime"` // ms since the epoch
	ProcessType                int          `json:"processType"`
	Product                    string       `json:"product"`
	Stackwalk                  int          `json:"stackwalk"`
	Version                    int          `json:"version"`
	PreprocessedProfileVersion int          `json:"preprocessedProfileVersion"`
	Symbolicated               bool         `json:"symbolicated"`
	Categories                 []ffCategory `json:"categories"`
	MarkerSchema               []any        `json:"markerSchema"`
}

type ffCategory struct {
	Name          string   `json:"name"`
	Color         string   `json:"color"`
	Subcategories []string `json:"subcategories"`
}

type ffThread struct {
	ProcessType         string          `json:"processType"`
	ProcessName         string          `json:"processName"`
	ProcessStartupTime  float64         `json:"processStartupTime"`
	ProcessShutdownTime *float64        `json:"processShutdownTime"`
	RegisterTime        float64         `json:"registerTime"`
	UnregisterTime      *float64        `json:"unregisterTime"`
	PausedRanges        []any           `json:"pausedRanges"`
	Name                string          `json:"name"`
	IsMainThread        bool            `json:"isMainThread"`
	PID                 string          `json:"pid"`
	TID                 int             `json:"tid"`
	Samples             ffSamples       `json:"samples"`
	Markers             ffMarkers       `json:"markers"`
	StackTable          ffStackTable    `json:"stackTable"`
	FrameTable          ffFrameTable    `json:"frameTable"`
	FuncTable           ffFuncTable     `json:"funcTable"`
	ResourceTable       ffResourceTable `json:"resourceTable"`
	NativeSymbols       ffNativeSymbols `json:"nativeSymbols"`
	StringArray         []string        `json:"stringArray"`
}

type ffSamples struct {
	Stack      []*int    `json:"stack"` // null: no Ruby frame
	Time       []float64 `json:"time"`  // ms since meta.startTime
	Weight     []int     `json:"weight"`
	WeightType string    `json:"weightType"`
	Length     int       `json:"length"`
}

type ffMarkers struct {
	Data      []any     `json:"data"`
	Name      []int     `json:"name"`
	StartTime []float64 `json:"startTime"`
	EndTime   []float64 `json:"endTime"`
	Phase     []int     `json:"phase"`
	Category  []int     `json:"category"`
	Length    int       `json:"length"`
}

type ffStackTable struct {
	Frame       []int  `json:"frame"`
	Prefix      []*int `json:"prefix"`
	Category    []int  `json:"category"`
	Subcategory []int  `json:"subcategory"`
	Length      int    `json:"length"`
}

type ffFrameTable struct {
	Address        []int  `json:"address"`
	InlineDepth    []int  `json:"inlineDepth"`
	Category       []int  `json:"category"`
	Subcategory    []int  `json:"subcategory"`
	Func           []int  `json:"func"`
	NativeSymbol   []*int `json:"nativeSymbol"`
	InnerWindowID  []*int `json:"innerWindowID"`
	Implementation []*int `json:"implementation"`
	Line           []*int `json:"line"`
	Column         []*int `json:"column"`
	Length         int    `json:"length"`
}

type ffFuncTable struct {
	Name          []int  `json:"name"`
	IsJS          []bool `json:"isJS"`
	RelevantForJS []bool `json:"relevantForJS"`
	Resource      []int  `json:"resource"`
	FileName      []*int `json:"fileName"`
	LineNumber    []*int `json:"lineNumber"`
	ColumnNumber  []*int `json:"columnNumber"`
	Length        int    `json:"length"`
}

type ffResourceTable struct {
	Lib    []int `json:"lib"`
	Name   []int `json:"name"`
	Host   []int `json:"host"`
	Type   []int `json:"type"`
	Length int   `json:"length"`
}

type ffNativeSymbols struct {
	LibIndex     []int `json:"libIndex"`
	Address      []int `json:"address"`
	Name         []int `json:"name"`
	FunctionSize []int `json:"functionSize"`
	Length       int   `json:"length"`
}

// ffBuilder fills one thread's tables.
type ffBuilder struct {
	th      *ffThread
	strings map[string]int
	funcs   map[[2]string]int
	frames  map[profile.Frame]int
	stacks  map[[2]int]int // (prefix+1, frame) -> stack
	// gc is the GC marker being extended: its name ("" when none is
	// open), its start and the time of its last sample.
	gc         string
	gcStart    float64
	gcLastTime float64
}

// gcMarkerName names the GC marker a sample's frames belong to: "GC" and
// the phase ("GC (marking)"), or "" outside the GC.
func gcMarkerName(frames []profile.Frame) string {
	name := ""
	for _, f := range frames {
		if f.Kind != profile.KindGC {
			continue
		}
		if f.Label == profile.LabelGC {
			name = "GC"
		} else {
			name = "GC " + f.Label
		}
	}
	return name
}

// markGC extends the thread's open GC marker with a sample at ms, or
// closes it and opens another (name "" opens none). A marker ends one
// sampling interval after its last sample.
func (b *ffBuilder) markGC(name string, ms, interval float64) {
	if b.gc != "" && name == b.gc {
		b.gcLastTime = ms
		return
	}
	if b.gc != "" {
		m := &b.th.Markers
		m.Data = append(m.Data, nil)
		m.Name = append(m.Name, b.str(b.gc))
		m.StartTime = append(m.StartTime, b.gcStart)
		m.EndTime = append(m.EndTime, b.gcLastTime+interval)
		m.Phase = append(m.Phase, ffMarkerInterval)
		m.Category = append(m.Category, ffCategoryGC)
		m.Length++
	}
	b.gc, b.gcStart, b.gcLastTime = name, ms, ms
}

// ffMarkerInterval is the marker phase of an interval with a start and an
// end.
const ffMarkerInterval = 1

func (b *ffBuilder) str(s string) int {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := len(b.th.StringArray)
	b.th.StringArray = append(b.th.StringArray, s)
	b.strings[s] = i
	return i
}

func intp(v int) *int { return &v }

func (b *ffBuilder) frame(f profile.Frame) int {
	if i, ok := b.frames[f]; ok {
		return i
	}
	cat := ffCategoryRuby
	switch {
	case f.Kind == profile.KindCFunc:
		cat = ffCategoryCFunc
	case f.Kind == profile.KindGC:
		cat = ffCategoryGC
	case f.Kind != profile.KindRuby:
		cat = ffCategoryOther
	}
	key := [2]string{f.Label, f.Path}
	fn, ok := b.funcs[key]
	if !ok {
		ft := &b.th.FuncTable
		fn = ft.Length
		b.funcs[key] = fn
		ft.Name = append(ft.Name, b.str(f.Label))
		ft.IsJS = append(ft.IsJS, cat == ffCategoryRuby)
		ft.RelevantForJS = append(ft.RelevantForJS, false)
		ft.Resource = append(ft.Resource, -1)
		var file *int
		if f.Path != "" {
			file = intp(b.str(f.Path))
		}
		ft.FileName = append(ft.FileName, file)
		ft.LineNumber = append(ft.LineNumber, nil)
		ft.ColumnNumber = append(ft.ColumnNumber, nil)
		ft.Length++
	}
	fr := &b.th.FrameTable
	i := fr.Length
	b.frames[f] = i
	fr.Address = append(fr.Address, -1)
	fr.InlineDepth = append(fr.InlineDepth, 0)
	fr.Category = append(fr.Category, cat)
	fr.Subcategory = append(fr.Subcategory, 0)
	fr.Func = append(fr.Func, fn)
	fr.NativeSymbol = append(fr.NativeSymbol, nil)
	fr.InnerWindowID = append(fr.InnerWindowID, nil)
	var impl, line *int
	if cat == ffCategoryCFunc {
		impl = intp(b.str("native")) // the profiler's name for native code
	}
	if f.Line > 0 {
		line = intp(f.Line)
	}
	fr.Implementation = append(fr.Implementation, impl)
	fr.Line = append(fr.Line, line)
	fr.Column = append(fr.Column, nil)
	fr.Length++
	return i
}

// stack returns the stack table's index for frames, root first, adding
// the prefixes it lacks.
func (b *ffBuilder) stack(frames []profile.Frame) int {
	prefix := -1
	for _, f := range frames {
		fi := b.frame(f)
		key := [2]int{prefix + 1, fi}
		si, ok := b.stacks[key]
		if !ok {
			st := &b.th.StackTable
			si = st.Length
			b.stacks[key] = si
			var p *int
			if prefix >= 0 {
				p = intp(prefix)
			}
			st.Frame = append(st.Frame, fi)
			st.Prefix = append(st.Prefix, p)
			st.Category = append(st.Category, b.th.FrameTable.Category[fi])
			st.Subcategory = append(st.Subcategory, 0)
			st.Length++
		}
		prefix = si
	}
	return prefix
}

// Firefox writes the Firefox Profiler's processed-profile JSON (version
// FirefoxProfileVersion, as vernier writes): one track per thread (and
// process, with --subprocesses), each sample at its time, Ruby frames in
// one category and C methods in another, the GC's frames in the
// profiler's "GC / CC" category, and each run of samples taken in the GC
// as an interval marker ("GC (marking)", "GC (sweeping)"). It needs the timeline; a profile
// without one (an aggregate) is written as one track whose samples are
// spread evenly over the recording. The process and thread roots of
// --subprocesses and --threads are left out: each thread is its own track.
func Firefox(w io.Writer, p *profile.Profile, o Options) error {
	f := ffFile{
		Meta: ffMeta{
			Interval: 1000 / p.Rate, StartTime: float64(p.Start.UnixNano()) / 1e6, Product: "rbscope", Version: 28,
			PreprocessedProfileVersion: FirefoxProfileVersion, Symbolicated: true, MarkerSchema: []any{},
			Categories: []ffCategory{
				{Name: "Ruby", Color: "purple", Subcategories: []string{"Other"}},
				{Name: "cfunc", Color: "yellow", Subcategories: []string{"Other"}},
				{Name: "Other", Color: "grey", Subcategories: []string{"Other"}},
				{Name: "GC / CC", Color: "orange", Subcategories: []string{"Other"}},
			},
		},
		Libs: []any{},
	}
	type key struct{ pid, tid int }
	builders := map[key]*ffBuilder{}
	var order []key
	builder := func(k key, name string) *ffBuilder {
		if b, ok := builders[k]; ok {
			return b
		}
		th := &ffThread{ProcessType: "default", ProcessName: o.Title, PausedRanges: []any{}, Name: name,
			IsMainThread: k.pid == k.tid, PID: strconv.Itoa(k.pid), TID: k.tid,
			Markers: ffMarkers{Data: []any{}, Name: []int{}, StartTime: []float64{}, EndTime: []float64{}, Phase: []int{}, Category: []int{}}}
		b := &ffBuilder{th: th, strings: map[string]int{}, funcs: map[[2]string]int{}, frames: map[profile.Frame]int{}, stacks: map[[2]int]int{}}
		builders[k] = b
		order = append(order, k)
		return b
	}
	ruby := func(frames []profile.Frame) []profile.Frame {
		out := frames[:0]
		for _, f := range frames {
			if !f.Synthetic() {
				out = append(out, f)
			}
		}
		return out
	}
	interval := 1000 / p.Rate
	add := func(b *ffBuilder, si int, ms float64) {
		s := &b.th.Samples
		var stack *int
		frames := ruby(p.StackFrames(si))
		if len(frames) > 0 {
			stack = intp(b.stack(frames))
		}
		b.markGC(gcMarkerName(frames), ms, interval)
		s.Stack = append(s.Stack, stack)
		s.Time = append(s.Time, ms)
		s.Length++
	}
	if p.Timeline != nil {
		for _, s := range p.Timeline {
			add(builder(key{s.PID, s.TID}, s.Thread), s.Stack, float64(s.Time.Nanoseconds())/1e6)
		}
	} else {
		b := builder(key{0, 0}, "all threads")
		n, step := 0, 0.0
		if p.Samples > 0 {
			step = float64(p.Duration.Nanoseconds()) / 1e6 / float64(p.Samples)
		}
		for si, st := range p.Stacks {
			for j := 0; j < st.Count; j++ {
				add(b, si, float64(n)*step)
				n++
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].pid != order[j].pid {
			return order[i].pid < order[j].pid
		}
		return order[i].tid < order[j].tid
	})
	for _, k := range order {
		b := builders[k]
		th := b.th
		th.Samples.WeightType = "samples"
		b.markGC("", 0, interval) // closes the last marker
		th.ResourceTable = ffResourceTable{Lib: []int{}, Name: []int{}, Host: []int{}, Type: []int{}}
		th.NativeSymbols = ffNativeSymbols{LibIndex: []int{}, Address: []int{}, Name: []int{}, FunctionSize: []int{}}
		if th.StringArray == nil {
			th.StringArray = []string{}
		}
		f.Threads = append(f.Threads, *th)
	}
	if f.Threads == nil {
		f.Threads = []ffThread{}
	}
	return json.NewEncoder(w).Encode(f)
}
