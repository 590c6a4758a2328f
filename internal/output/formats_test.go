package output

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/ctxlabels"
	"github.com/rbscope/rbscope/internal/profile"

	"github.com/rbscope/rbscope/internal/testruby"
)

// timedSample is a recording with a timeline: two threads of one process
// and one of a child, each sample with its time.
func timedSample() *profile.Profile {
	p := profile.NewProfile(100)
	p.KeepTimeline()
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "app.rb", Line: 9}
	work := profile.Frame{Kind: profile.KindRuby, Label: "Object#work", Path: "app.rb", Line: 3}
	work4 := profile.Frame{Kind: profile.KindRuby, Label: "Object#work", Path: "app.rb", Line: 4}
	blk := profile.Frame{Kind: profile.KindRuby, Label: "block in Object#work", Path: "lib/w.rb", Line: 12}
	sleep := profile.Frame{Kind: profile.KindCFunc, Label: "Kernel#sleep"}
	stacks := [][]profile.Frame{{main, work}, {main, work4, blk}, {main, sleep}, {main, work, sleep}}
	for i := 0; i < 40; i++ {
		t := p.Start.Add(time.Duration(i) * 10 * time.Millisecond)
		p.AddSample(stacks[i%4], t, 100, 100, "main")
		if i%3 == 0 {
			p.AddSample(stacks[(i/3)%3], t, 100, 101, "worker")
		}
		if i%5 == 0 {
			p.AddSample(stacks[1], t, 200, 200, "main")
		}
	}
	p.Ticks, p.Errors, p.Duration = 40, 1, 400*time.Millisecond
	return p
}

// TestCallgrindAnnotate reads the callgrind output back with valgrind's
// callgrind_annotate: its program total is the sample count, and each
// function's exclusive and inclusive samples are the profile's self and
// total.
func TestCallgrindAnnotate(t *testing.T) {
	ca, err := exec.LookPath("callgrind_annotate")
	if err != nil {
		testruby.Missing(t, "callgrind_annotate not installed (Debian package valgrind)")
	}
	for name, p := range map[string]*profile.Profile{"sample": sample(), "timed": timedSample()} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "callgrind.out.1")
			var b bytes.Buffer
			if err := Callgrind(&b, p, Options{Title: "rbscope record pid 1"}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			annotate := func(inclusive string) map[string]int {
				out, err := exec.Command(ca, "--inclusive="+inclusive, "--auto=no", "--threshold=100", path).CombinedOutput()
				if err != nil {
					t.Fatalf("callgrind_annotate: %v\n%s", err, out)
				}
				got := map[string]int{}
				row := regexp.MustCompile(`^\s*([\d,]+|\.)\s+(?:\([\d.]+%\)\s+)?(.+)$`)
				sc := bufio.NewScanner(bytes.NewReader(out))
				for sc.Scan() {
					m := row.FindStringSubmatch(sc.Text())
					if m == nil {
						continue
					}
					n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
					got[m[2]] = n
				}
				if got["PROGRAM TOTALS"] != p.Samples {
					t.Fatalf("callgrind_annotate total %d, want %d:\n%s", got["PROGRAM TOTALS"], p.Samples, out)
				}
				return got
			}
			excl, incl := annotate("no"), annotate("yes")
			for _, s := range p.Functions() {
				file := s.Frame.Path
				if s.Frame.Kind == profile.KindCFunc {
					file = "<cfunc>"
				}
				key := file + ":" + s.Frame.Label
				if excl[key] != s.Self || incl[key] != s.Total {
					t.Errorf("%s: exclusive %d inclusive %d, want %d %d", key, excl[key], incl[key], s.Self, s.Total)
				}
			}
		})
	}
}

func TestSummaryByLine(t *testing.T) {
	var b bytes.Buffer
	if err := SummaryByLine(&b, timedSample()); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, l := range strings.Split(b.String(), "\n")[3:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		self, _ := strconv.Atoi(f[2])
		total, _ := strconv.Atoi(f[3])
		got[f[4]] = [2]int{self, total}
	}
	// Stacks by index: 0 main>work:3, 1 main>work:4>blk, 2 main>sleep,
	// 3 main>work:3>sleep. Thread main takes i%4; worker (i/3)%3 for
	// i%3 == 0; the child stack 1 for i%5 == 0.
	var n [4]int
	for i := 0; i < 40; i++ {
		n[i%4]++
		if i%3 == 0 {
			n[(i/3)%3]++
		}
		if i%5 == 0 {
			n[1]++
		}
	}
	want := map[string][2]int{
		"app.rb:9":     {0, n[0] + n[1] + n[2] + n[3]},
		"app.rb:3":     {n[0], n[0] + n[3]},
		"app.rb:4":     {0, n[1]},
		"lib/w.rb:12":  {n[1], n[1]},
		"Kernel#sleep": {n[2] + n[3], n[2] + n[3]},
	}
	for loc, w := range want {
		if got[loc] != w {
			t.Errorf("%s: self/total %v, want %v\n%s", loc, got[loc], w, b.String())
		}
	}
	if !strings.Contains(b.String(), "lib/w.rb:12  (block in Object#work)") {
		t.Errorf("line rows do not name their function:\n%s", b.String())
	}
}

// TestRawReportSameCollapsed: a raw recording rendered later gives what
// writing the format directly from the same samples gives, for every
// format but the SVG's and pprof's (which carry no time of writing either,
// but are compared through collapsed and summary); the timeline survives.
func TestRawReportSameCollapsed(t *testing.T) {
	for name, p := range map[string]*profile.Profile{"timeline": timedSample(), "aggregate only": sample()} {
		t.Run(name, func(t *testing.T) {
			o := Options{Lines: true, Title: "rbscope record pid 100"}
			var raw bytes.Buffer
			if err := Raw(&raw, p, o); err != nil {
				t.Fatal(err)
			}
			q, title, err := ReadRaw(bytes.NewReader(raw.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if title != o.Title {
				t.Errorf("title %q", title)
			}
			for _, format := range []string{"collapsed", "summary", "summary-by-line", "callgrind", "speedscope", "raw", "firefox"} {
				var direct, report bytes.Buffer
				if err := Write(&direct, format, p, o); err != nil {
					t.Fatal(err)
				}
				if err := Write(&report, format, q, o); err != nil {
					t.Fatal(err)
				}
				if direct.String() != report.String() {
					t.Errorf("%s from the raw recording differs:\n%s\nwant:\n%s", format, report.String(), direct.String())
				}
			}
			if len(q.Timeline) != len(p.Timeline) || q.Ticks != p.Ticks || q.Errors != p.Errors || q.Duration != p.Duration || !q.Start.Equal(p.Start) {
				t.Errorf("read back: %d timeline samples, ticks %d errors %d duration %v; want %d %d %d %v",
					len(q.Timeline), q.Ticks, q.Errors, q.Duration, len(p.Timeline), p.Ticks, p.Errors, p.Duration)
			}
			for i := range p.Timeline {
				a, b := p.Timeline[i], q.Timeline[i]
				if a.Time != b.Time || a.TID != b.TID || a.PID != b.PID || a.Thread != b.Thread ||
					fmt.Sprint(p.StackFrames(a.Stack)) != fmt.Sprint(q.StackFrames(b.Stack)) {
					t.Fatalf("sample %d: %+v, want %+v", i, b, a)
				}
			}
		})
	}
}

// TestRawRefusesDamage: a raw recording that is not one, of a newer
// version, truncated, or referring to what it has not defined is refused
// with a reason.
func TestRawRefusesDamage(t *testing.T) {
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte(s))
		zw.Close()
		return b.Bytes()
	}
	var good bytes.Buffer
	Raw(&good, timedSample(), Options{})
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"not gzip":  {[]byte("hello"), "not gzip"},
		"no header": {gz(`{"a":1}`), "no rbscope-raw header"},
		"newer":     {gz(`{"format":"rbscope-raw","version":99}`), "version 99"},
		"bad frame": {gz(`{"format":"rbscope-raw","version":1,"rate":100,"samples":1}` + "\n" + `["s",[3]]`), "frame 3 of 0"},
		"bad stack": {gz(`{"format":"rbscope-raw","version":1,"rate":100,"samples":1}` + "\n" + `["th",1,1,"m"]` + "\n" + `["t",0,0,0]`), "stack 0 of 0"},
		"unknown":   {gz(`{"format":"rbscope-raw","version":1,"rate":100}` + "\n" + `["zz"]`), `unknown record "zz"`},
		"short":     {gz(`{"format":"rbscope-raw","version":1,"rate":100,"samples":5}`), "truncated"},
		"cut":       {good.Bytes()[:good.Len()/2], "raw recording"},
		"no rate":   {gz(`{"format":"rbscope-raw","version":1,"rate":0}`), "header is damaged"},
	} {
		_, _, err := ReadRaw(bytes.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// checkFirefox decodes a processed profile and checks it as the Firefox
// Profiler reads it: every table's columns have its length, indexes point
// into their tables (a stack's prefix to an earlier stack), times do not
// go back. It returns each track's samples as stacks of "label file:line"
// (root first) with their times, keyed "pid/tid name".
func checkFirefox(t *testing.T, b []byte) (map[string][]string, map[string][]float64) {
	t.Helper()
	var doc struct {
		Meta struct {
			Interval                   float64 `json:"interval"`
			StartTime                  float64 `json:"startTime"`
			PreprocessedProfileVersion int     `json:"preprocessedProfileVersion"`
			Categories                 []struct {
				Name          string   `json:"name"`
				Subcategories []string `json:"subcategories"`
			} `json:"categories"`
		} `json:"meta"`
		Libs    []any `json:"libs"`
		Threads []struct {
			Name    string `json:"name"`
			PID     string `json:"pid"`
			TID     int    `json:"tid"`
			Samples struct {
				Stack  []*int    `json:"stack"`
				Time   []float64 `json:"time"`
				Length int       `json:"length"`
			} `json:"samples"`
			StackTable struct {
				Frame    []int  `json:"frame"`
				Prefix   []*int `json:"prefix"`
				Category []int  `json:"category"`
				Length   int    `json:"length"`
			} `json:"stackTable"`
			FrameTable struct {
				Func     []int  `json:"func"`
				Line     []*int `json:"line"`
				Category []int  `json:"category"`
				Address  []int  `json:"address"`
				Length   int    `json:"length"`
			} `json:"frameTable"`
			FuncTable struct {
				Name     []int  `json:"name"`
				FileName []*int `json:"fileName"`
				IsJS     []bool `json:"isJS"`
				Length   int    `json:"length"`
			} `json:"funcTable"`
			Markers struct {
				Length int `json:"length"`
			} `json:"markers"`
			StringArray []string `json:"stringArray"`
		} `json:"threads"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if doc.Meta.PreprocessedProfileVersion != FirefoxProfileVersion || doc.Meta.Interval <= 0 || doc.Meta.StartTime <= 0 || len(doc.Meta.Categories) == 0 || doc.Libs == nil {
		t.Fatalf("meta: %+v", doc.Meta)
	}
	stacks, times := map[string][]string{}, map[string][]float64{}
	for _, th := range doc.Threads {
		key := th.PID + "/" + strconv.Itoa(th.TID) + " " + th.Name
		s, st, fr, fn := th.Samples, th.StackTable, th.FrameTable, th.FuncTable
		if len(s.Stack) != s.Length || len(s.Time) != s.Length || len(st.Frame) != st.Length || len(st.Prefix) != st.Length ||
			len(st.Category) != st.Length || len(fr.Func) != fr.Length || len(fr.Line) != fr.Length || len(fr.Category) != fr.Length ||
			len(fr.Address) != fr.Length || len(fn.Name) != fn.Length || len(fn.FileName) != fn.Length || len(fn.IsJS) != fn.Length {
			t.Fatalf("%s: a column is not its table's length", key)
		}
		str := func(i int) string {
			if i < 0 || i >= len(th.StringArray) {
				t.Fatalf("%s: string %d of %d", key, i, len(th.StringArray))
			}
			return th.StringArray[i]
		}
		for i := 0; i < st.Length; i++ {
			if p := st.Prefix[i]; p != nil && (*p < 0 || *p >= i) || st.Frame[i] < 0 || st.Frame[i] >= fr.Length {
				t.Fatalf("%s: stack %d: prefix %v frame %d", key, i, st.Prefix[i], st.Frame[i])
			}
			if st.Category[i] < 0 || st.Category[i] >= len(doc.Meta.Categories) {
				t.Fatalf("%s: stack %d category %d", key, i, st.Category[i])
			}
		}
		for i := 0; i < fr.Length; i++ {
			if fr.Func[i] < 0 || fr.Func[i] >= fn.Length {
				t.Fatalf("%s: frame %d func %d", key, i, fr.Func[i])
			}
		}
		for i := 0; i < s.Length; i++ {
			if i > 0 && s.Time[i] < s.Time[i-1] {
				t.Fatalf("%s: sample %d goes back in time", key, i)
			}
			var names []string
			for si := s.Stack[i]; si != nil; si = st.Prefix[*si] {
				if *si < 0 || *si >= st.Length {
					t.Fatalf("%s: sample %d stack %d", key, i, *si)
				}
				f := st.Frame[*si]
				name := str(fn.Name[fr.Func[f]])
				if file := fn.FileName[fr.Func[f]]; file != nil {
					name += " " + str(*file)
				}
				if fr.Line[f] != nil {
					name += ":" + strconv.Itoa(*fr.Line[f])
				}
				names = append([]string{name}, names...)
			}
			stacks[key] = append(stacks[key], strings.Join(names, ";"))
			times[key] = append(times[key], s.Time[i])
		}
	}
	return stacks, times
}

// TestFirefoxStructure: one track per thread holding exactly that
// thread's samples, each with its stack and time, in tables the Firefox
// Profiler can index.
func TestFirefoxStructure(t *testing.T) {
	p := timedSample()
	var b bytes.Buffer
	if err := Firefox(&b, p, Options{Title: "rbscope record pid 100"}); err != nil {
		t.Fatal(err)
	}
	stacks, times := checkFirefox(t, b.Bytes())
	want, wantTimes := map[string][]string{}, map[string][]float64{}
	for _, s := range p.Timeline {
		key := fmt.Sprintf("%d/%d %s", s.PID, s.TID, s.Thread)
		var names []string
		for _, f := range p.StackFrames(s.Stack) {
			name := f.Label
			if f.Path != "" {
				name += " " + f.Path
			}
			if f.Line > 0 {
				name += ":" + strconv.Itoa(f.Line)
			}
			names = append(names, name)
		}
		want[key] = append(want[key], strings.Join(names, ";"))
		wantTimes[key] = append(wantTimes[key], float64(s.Time.Nanoseconds())/1e6)
	}
	if len(stacks) != 3 {
		t.Errorf("%d tracks, want 3 (two threads and a child's)", len(stacks))
	}
	for key, w := range want {
		if fmt.Sprint(stacks[key]) != fmt.Sprint(w) || fmt.Sprint(times[key]) != fmt.Sprint(wantTimes[key]) {
			t.Errorf("track %s:\n%v at %v\nwant\n%v at %v", key, stacks[key], times[key], w, wantTimes[key])
		}
	}
	// Without a timeline: one track holding every sample.
	b.Reset()
	if err := Firefox(&b, sample(), Options{}); err != nil {
		t.Fatal(err)
	}
	stacks, _ = checkFirefox(t, b.Bytes())
	if len(stacks) != 1 || len(stacks["0/0 all threads"]) != sample().Samples {
		t.Errorf("aggregate profile: %d tracks %v", len(stacks), stacks)
	}
}

// TestFirefoxGCMarkers: each run of samples taken in the GC becomes one
// interval marker per phase, from its first sample to one interval after
// its last, and the GC's frames are in the "GC / CC" category.
func TestFirefoxGCMarkers(t *testing.T) {
	p := profile.NewProfile(100)
	p.KeepTimeline()
	work := profile.Frame{Kind: profile.KindRuby, Label: "Object#work", Path: "app.rb", Line: 3}
	gc := profile.Frame{Kind: profile.KindGC, Label: profile.LabelGC}
	marking := profile.Frame{Kind: profile.KindGC, Label: profile.LabelMarking}
	sweeping := profile.Frame{Kind: profile.KindGC, Label: profile.LabelSweeping}
	for i, st := range [][]profile.Frame{{work}, {work}, {work, gc, marking}, {work, gc, marking}, {work, gc, marking}, {work, gc, sweeping}, {work}, {work, gc}} {
		p.AddSample(st, p.Start.Add(time.Duration(i)*10*time.Millisecond), 100, 100, "main")
	}
	var b bytes.Buffer
	if err := Firefox(&b, p, Options{}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Meta struct {
			Categories []struct{ Name string } `json:"categories"`
		} `json:"meta"`
		Threads []struct {
			Markers struct {
				Name      []int     `json:"name"`
				StartTime []float64 `json:"startTime"`
				EndTime   []float64 `json:"endTime"`
				Phase     []int     `json:"phase"`
				Category  []int     `json:"category"`
				Length    int       `json:"length"`
			} `json:"markers"`
			FrameTable struct {
				Func     []int `json:"func"`
				Category []int `json:"category"`
			} `json:"frameTable"`
			FuncTable struct {
				Name []int `json:"name"`
			} `json:"funcTable"`
			StringArray []string `json:"stringArray"`
		} `json:"threads"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	th := doc.Threads[0]
	var got []string
	for i := 0; i < th.Markers.Length; i++ {
		got = append(got, fmt.Sprintf("%s %g-%g phase %d %s", th.StringArray[th.Markers.Name[i]], th.Markers.StartTime[i], th.Markers.EndTime[i],
			th.Markers.Phase[i], doc.Meta.Categories[th.Markers.Category[i]].Name))
	}
	want := []string{"GC (marking) 20-50 phase 1 GC / CC", "GC (sweeping) 50-60 phase 1 GC / CC", "GC 70-80 phase 1 GC / CC"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("markers %q, want %q", got, want)
	}
	for i, fn := range th.FrameTable.Func {
		name := th.StringArray[th.FuncTable.Name[fn]]
		cat := doc.Meta.Categories[th.FrameTable.Category[i]].Name
		if strings.HasPrefix(name, "(") != (cat == "GC / CC") {
			t.Errorf("frame %s in category %s", name, cat)
		}
	}
}

// TestRawLabels: a raw recording keeps its stacks' labels (in its header,
// the format's version unchanged), and one made before labels were kept
// gets those ctxlabels derives from its frames.
func TestRawLabels(t *testing.T) {
	ruby := func(label string) profile.Frame {
		return profile.Frame{Kind: profile.KindRuby, Label: label, Path: "app.rb", Line: 1}
	}
	p := profile.NewProfile(100)
	p.KeepTimeline()
	action := []profile.Frame{ruby("ActionController::BasicImplicitRender#send_action"), ruby("ItemsController#index"), ruby("Object#spin")}
	other := []profile.Frame{ruby("Object#spin")}
	for i := range 3 {
		p.AddSample(action, p.Start.Add(time.Duration(i)), 1, 1, "main")
		p.AddSample(other, p.Start.Add(time.Duration(i)), 1, 2, "w")
	}
	ctxlabels.Annotate(p, nil)
	var raw bytes.Buffer
	if err := Raw(&raw, p, Options{}); err != nil {
		t.Fatal(err)
	}
	q, _, err := ReadRaw(bytes.NewReader(raw.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	byEndpoint := func(p *profile.Profile) map[string]int {
		out := map[string]int{}
		for _, st := range p.Stacks {
			out[st.Label(profile.LabelEndpoint)] += st.Count
		}
		return out
	}
	want := map[string]int{"ItemsController#index": 3, "": 3}
	if got := byEndpoint(q); !maps.Equal(got, want) {
		t.Errorf("read back: %v, want %v", got, want)
	}
	// The same recording as an older rbscope wrote it: no labels key.
	zr, _ := gzip.NewReader(bytes.NewReader(raw.Bytes()))
	text, _ := io.ReadAll(zr)
	head, rest, _ := bytes.Cut(text, []byte("\n"))
	var h map[string]any
	json.Unmarshal(head, &h)
	if h["version"] != 1.0 || h["labels"] == nil {
		t.Fatalf("header %s: want version 1 and labels", head)
	}
	delete(h, "labels")
	head, _ = json.Marshal(h)
	var old bytes.Buffer
	zw := gzip.NewWriter(&old)
	zw.Write(append(append(head, '\n'), rest...))
	zw.Close()
	q, _, err = ReadRaw(&old)
	if err != nil {
		t.Fatal(err)
	}
	if got := byEndpoint(q); !maps.Equal(got, want) {
		t.Errorf("an older recording: %v, want %v", got, want)
	}
}
