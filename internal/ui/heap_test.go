package ui

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heapfile"
	"github.com/rbscope/rbscope/internal/procfs"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/ui/uitest"
	"github.com/rbscope/rbscope/internal/wire"
)

// dumpHeap writes the heap of live process pid to path as rbscope heap
// dump does (from a snapshot), strings redacted or not, once its main
// thread sleeps: the test programs report before their last GC, which
// the dump must not stop halfway (the command, started afterwards, is
// late enough).
func dumpHeap(t *testing.T, pid int, path string, redact bool) {
	t.Helper()
	asleep := 0
	for deadline := time.Now().Add(30 * time.Second); asleep < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, err := procfs.ReadStat(pid, pid); err == nil && st.State == 'S' {
			asleep++
		} else {
			asleep = 0
		}
	}
	if _, err := heapfile.Write(pid, path, heapfile.Options{Pause: true, Redact: redact, VM: rubyvm.Options{}}); err != nil {
		t.Fatalf("heap dump of pid %d: %v", pid, err)
	}
}

// ivarProgram is what testdata/ivar_names.rb writes about itself.
type ivarProgram struct {
	PID     int `json:"pid"`
	Objects []struct {
		What    string      `json:"what"`
		Address string      `json:"address"`
		Ivars   [][2]string `json:"ivars"`
	} `json:"objects"`
}

// ivarPage is what the object page answers of an object's instance
// variables.
type ivarPage struct {
	Ivars []struct {
		Name   string `json:"name"`
		Object *struct {
			Address string `json:"address"`
		} `json:"object"`
		Address string `json:"address"`
		Value   string `json:"value"`
	} `json:"instance_variables"`
	IvarsError string `json:"instance_variables_error"`
}

// names returns the page's instance variables that instance_variables
// lists (one @) as "name=value", a value an address or an inspect.
func (p *ivarPage) names() string {
	var out []string
	for _, iv := range p.Ivars {
		if !strings.HasPrefix(iv.Name, "@") || strings.HasPrefix(iv.Name, "@@") {
			continue
		}
		v := iv.Value
		switch {
		case iv.Object != nil:
			v = iv.Object.Address
		case iv.Address != "":
			v = iv.Address
		}
		out = append(out, iv.Name+"="+v)
	}
	return strings.Join(out, " ")
}

// TestObjectIvars: the object page of a dump rbscope took shows each
// object's instance variables by name, in order, with the values the
// program reports (references as objects of the dump, immediates as their
// inspect), both when the server built the dump's index and when it read
// it back, and in the dump compressed (zstd, gzip); for the program's own
// dump_all of the same heap it shows none, and no error.
func TestObjectIvars(t *testing.T) {
	dir := t.TempDir()
	rubyDump := filepath.Join(dir, "dump_all.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "ivar_names.rb", nil, rubyDump)
	var rep ivarProgram
	p.WaitReport(t, &rep, 60*time.Second)
	dump := filepath.Join(dir, "rbscope.json")
	dumpHeap(t, rep.PID, dump, false)
	compressed := []string{dump + ".zst", dump + ".gz"}
	for _, c := range compressed {
		dumpHeap(t, rep.PID, c, false)
	}
	for _, round := range []string{"index built", "index read back"} {
		ts := newTestServer(t, Options{Files: append([]string{dump, rubyDump}, compressed...)})
		files := ts.files(t)
		for _, f := range files {
			if f.State != "ready" {
				t.Fatalf("%s: %s %s", f.Name, f.State, f.Error)
			}
		}
		if built := files[0].Built; built != (round == "index built") {
			t.Errorf("%s: index_built %v", round, built)
		}
		for _, o := range rep.Objects {
			var want []string
			for _, iv := range o.Ivars {
				want = append(want, iv[0]+"="+iv[1])
			}
			var mine, theirs ivarPage
			ts.get(t, "/api/heap/object?f=0&addr="+o.Address, &mine)
			if got := mine.names(); got != strings.Join(want, " ") || mine.IvarsError != "" {
				t.Errorf("%s: %s (%s): the object page shows\n  %s %s\nthe program says\n  %s", round, o.What, o.Address, got, mine.IvarsError, strings.Join(want, " "))
			}
			for f := range compressed {
				var page ivarPage
				ts.get(t, fmt.Sprintf("/api/heap/object?f=%d&addr=%s", 2+f, o.Address), &page)
				if got := page.names(); got != strings.Join(want, " ") || page.IvarsError != "" {
					t.Errorf("%s: %s: %s (%s): the object page shows\n  %s %s\nthe program says\n  %s", round, compressed[f], o.What, o.Address, got, page.IvarsError, strings.Join(want, " "))
				}
			}
			for _, iv := range mine.Ivars {
				if iv.Object == nil && iv.Value == "" {
					t.Errorf("%s: %s: %s is neither an object of the dump nor an immediate (%q)", round, o.What, iv.Name, iv.Address)
				}
			}
			ts.get(t, "/api/heap/object?f=1&addr="+o.Address, &theirs)
			if len(theirs.Ivars) != 0 || theirs.IvarsError != "" {
				t.Errorf("%s: %s in dump_all's dump: %d instance variables, error %q", round, o.What, len(theirs.Ivars), theirs.IvarsError)
			}
		}
		t.Logf("%s: %d objects' instance variables as the program says", round, len(rep.Objects))
	}
}

// TestRedactedDump: a dump with strings redacted stays redacted in every
// heap view and in the index the server builds: the program's secret
// String shows with its size only.
func TestRedactedDump(t *testing.T) {
	marker := fmt.Sprintf("secret-marker-%d", time.Now().UnixNano())
	var self struct{ Address string }
	pid := testruby.StartInline(t, testruby.Rubies(t)[0], `
require "objspace"; require "json"
$keep = ARGV.fetch(0, `+"%q("+marker+")"+`).chars.join; $copy = $keep.chars.join
puts JSON.generate("address" => ObjectSpace.dump($keep)[/"address":"(0x\h+)"/, 1])
$stdout.flush
sleep`, &self)
	if !strings.HasPrefix(self.Address, "0x") {
		t.Fatalf("setup: the program said %+v", self)
	}
	dir := t.TempDir()
	dump := filepath.Join(dir, "redacted.json")
	dumpHeap(t, pid, dump, true)
	ts := newTestServer(t, Options{Files: []string{dump}})
	group := uitest.ClassGroup(t, ts.get, 0, "String")
	var obj struct {
		Object struct{ Address, Desc string }
	}
	ts.get(t, "/api/heap/object?f=0&addr="+self.Address, &obj)
	if obj.Object.Address != self.Address || strings.Contains(obj.Object.Desc, "secret") {
		t.Errorf("the object page describes the String as %q", obj.Object.Desc)
	}
	for _, path := range []string{
		fmt.Sprintf("/api/heap/objects?f=0&by=class&group=%d&limit=1000", group),
		"/api/heap/object?f=0&addr=" + self.Address,
		"/api/heap/paths?f=0&addr=" + self.Address,
		"/api/heap/top?f=0&n=1000",
		"/api/heap/waste?f=0&n=1000",
		"/api/heap/diff?f=0&before=0&by=class",
		"/api/heap/suspects?f=0&before=0",
	} {
		if body := ts.request(t, path).Body.String(); strings.Contains(body, "secret-marker") || !strings.HasPrefix(body, "{") {
			t.Errorf("%s shows the redacted String (or no JSON): %.200s", path, body)
		}
	}
	index := filepath.Join(dir, ".redacted.json.rbscope-index")
	b, err := os.ReadFile(index)
	if st, serr := os.Stat(index); err != nil || serr != nil || st.Mode().Perm() != 0o600 || bytes.Contains(b, []byte("secret-marker")) {
		t.Errorf("the index %s: %v %v, mode %v, holds the String: %v", index, err, serr, st, bytes.Contains(b, []byte("secret-marker")))
	}
}

// wasteView is the Waste view's answer.
type wasteView struct {
	Strings []struct {
		Value                string
		Cut                  bool
		Count, Bytes, Wasted uint64
	}
	StringsWasted uint64         `json:"strings_wasted"`
	Empty         []wire.DiffRow `json:"empty"`
	EmptySites    []wire.DiffRow `json:"empty_sites"`
	Oversized     []struct {
		Object               struct{ Type, Class string }
		Length, Bytes, Spare uint64
	}
	OversizedSpare uint64         `json:"oversized_spare"`
	OverClasses    []wire.DiffRow `json:"oversized_classes"`
	OverSites      []wire.DiffRow `json:"oversized_sites"`
}

// TestHeapWaste: the Waste view finds the value a program holds in 4,000
// Strings, first, with the bytes the program measures them at, the 3,000
// empty Arrays it made, at the line Ruby says, and its oversized Arrays
// with the spare bytes their memsizes give; opened again from the index,
// the same answer.
func TestHeapWaste(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "waste.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_waste.rb", nil, dump)
	var rep struct {
		Value       string `json:"value"`
		Copies      uint64 `json:"copies"`
		CopyBytes   uint64 `json:"copy_bytes"`
		EmptyArrays uint64 `json:"empty_arrays"`
		EmptySite   string `json:"empty_site"`
		Oversized   uint64 `json:"oversized_arrays"`
		OverLength  uint64 `json:"oversized_length"`
		OverBytes   uint64 `json:"oversized_bytes"`
		OverSite    string `json:"oversized_site"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	ts := newTestServer(t, Options{Files: []string{dump}})
	var w wasteView
	ts.get(t, "/api/heap/waste?f=0&n=10", &w)
	// The program's Strings, and perhaps the one its report built.
	if len(w.Strings) == 0 || w.Strings[0].Value != rep.Value || w.Strings[0].Cut || w.Strings[0].Count < rep.Copies || w.Strings[0].Count > rep.Copies+1 ||
		w.Strings[0].Bytes < rep.CopyBytes || w.Strings[0].Wasted < rep.CopyBytes*(rep.Copies-1)/rep.Copies || w.StringsWasted < w.Strings[0].Wasted {
		t.Errorf("duplicate Strings %+v (%d wasted in all); the program holds %q %d times in %d bytes", w.Strings, w.StringsWasted, rep.Value, rep.Copies, rep.CopyBytes)
	}
	var byClass, bySite uint64
	for _, r := range w.Empty {
		if r.Class == "Array" {
			byClass = r.Count
		}
	}
	for _, r := range w.EmptySites {
		if r.Class == "Array" && r.Site == rep.EmptySite {
			bySite = r.Count
		}
	}
	if byClass < rep.EmptyArrays || bySite != rep.EmptyArrays {
		t.Errorf("empty Arrays: %d in all, %d at %s; the program made %d there (%+v)", byClass, bySite, rep.EmptySite, rep.EmptyArrays, w.EmptySites)
	}
	// The oversized Arrays: each needs its slot and 8 bytes an element,
	// the rest of the memsize the program measured is spare. Nothing else
	// the program made at that line is an Array.
	want := rep.OverBytes - rep.Oversized*(40+8*rep.OverLength)
	var atSite *wire.DiffRow
	for k, r := range w.OverSites {
		if r.Site == rep.OverSite {
			atSite = &w.OverSites[k]
		}
	}
	if atSite == nil || atSite.Class != "Array" || atSite.Count != rep.Oversized || atSite.Bytes != want {
		t.Errorf("oversized Arrays at %s: %+v; the program made %d of %d elements, %d bytes spare by its memsizes (%+v)", rep.OverSite, atSite, rep.Oversized, rep.OverLength, want, w.OverSites)
	}
	if len(w.Oversized) != 10 || w.OversizedSpare < want {
		t.Errorf("%d oversized collections listed, %d bytes spare in all; want 10, at least %d", len(w.Oversized), w.OversizedSpare, want)
	}
	for _, o := range w.Oversized {
		if o.Object.Type != "ARRAY" || o.Length != rep.OverLength || o.Spare != o.Bytes-(40+8*o.Length) {
			t.Errorf("oversized %+v: want the program's Arrays of %d elements", o, rep.OverLength)
		}
	}
	// Opened again, from the index the first server wrote (which keeps
	// the waste found as the dump was first opened): the same answer.
	again := newTestServer(t, Options{Files: []string{dump}})
	if f := again.files(t); len(f) != 1 || f[0].Built {
		t.Errorf("opened again: %+v, want the index read back", f)
	}
	var kept wasteView
	again.get(t, "/api/heap/waste?f=0&n=10", &kept)
	if !reflect.DeepEqual(kept, w) {
		t.Errorf("the waste opened again from the index: %+v; first %+v", kept, w)
	}
}

// TestHeapPivots: on a dump with allocation sites, the overview groups by
// site, by gem and by GC generation, and its rows hold the objects the
// program says it made there: 3,000 Strings at a line of a gem of its own,
// 2,000 Objects at a line of its own, all of them under the gem's row or
// the app's; 1,500 Objects made after a GC in their generation's row. A
// row drills down to its objects. A dump without sites says why it has no
// such grouping.
func TestHeapPivots(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "gems.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_gems.rb", nil, dump, dir)
	var rep struct {
		GemSite    string `json:"gem_site"`
		AppSite    string `json:"app_site"`
		GemStrings uint64 `json:"gem_strings"`
		AppObjects uint64 `json:"app_objects"`
		Later      uint64 `json:"later_objects"`
		LaterGen   uint64 `json:"later_generation"`
		AppGen     uint64 `json:"app_generation"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	plain, _ := heapGraphDump(t, dir)
	ts := newTestServer(t, Options{Files: []string{dump, plain}})
	files := ts.files(t)
	type row struct {
		ID                int
		Site, Gem, Class  string
		Generation        *uint64
		Type              string
		Count             uint64
		Shallow, Retained uint64
	}
	overview := func(by, sort string) []row {
		var ov struct {
			Objects  int  `json:"objects"`
			HasSites bool `json:"has_sites"`
			Page     page[row]
		}
		ts.get(t, "/api/heap/overview?f=0&limit=1000&by="+by+"&sort="+sort, &ov)
		var sum uint64
		for _, r := range ov.Page.Rows {
			sum += r.Count
		}
		if !ov.HasSites || int(sum) != ov.Objects || ov.Objects != files[0].Objects {
			t.Errorf("by %s: has_sites %v; rows add up to %d objects of %d (the dump has %d)", by, ov.HasSites, sum, ov.Objects, files[0].Objects)
		}
		return ov.Page.Rows
	}
	find := func(rows []row, f func(row) bool) (row, bool) {
		for _, r := range rows {
			if f(r) {
				return r, true
			}
		}
		return row{}, false
	}
	drilled := func(by string, r row) int {
		var objs struct{ Page struct{ Total int } }
		ts.get(t, fmt.Sprintf("/api/heap/objects?f=0&by=%s&group=%d&limit=1", by, r.ID), &objs)
		return objs.Page.Total
	}
	rows := overview("site", "retained")
	if r, ok := find(rows, func(r row) bool { return r.Site == rep.GemSite && r.Class == "String" }); !ok || r.Count != rep.GemStrings || r.Type != "STRING" {
		t.Errorf("by site: the gem's row %+v (found %v), the program made %d Strings at %s", r, ok, rep.GemStrings, rep.GemSite)
	} else if n := drilled("site", r); n != int(rep.GemStrings) {
		t.Errorf("by site: the gem's row drills down to %d objects, want %d", n, rep.GemStrings)
	}
	if r, ok := find(rows, func(r row) bool { return r.Site == rep.AppSite && r.Class == "Object" }); !ok || r.Count != rep.AppObjects {
		t.Errorf("by site: the app's row %+v (found %v), the program made %d Objects at %s", r, ok, rep.AppObjects, rep.AppSite)
	}
	rows = overview("gem", "retained")
	if r, ok := find(rows, func(r row) bool { return r.Gem == "fakegem-1.2.3" }); !ok || r.Count < rep.GemStrings {
		t.Errorf("by gem: fakegem-1.2.3's row %+v (found %v), want at least its %d Strings", r, ok, rep.GemStrings)
	}
	if r, ok := find(rows, func(r row) bool { return r.Gem == "(app)" }); !ok || r.Count < rep.AppObjects {
		t.Errorf("by gem: the app's row %+v (found %v), want at least its %d Objects", r, ok, rep.AppObjects)
	}
	// By GC generation, by name: the objects Ruby made before tracing
	// began first, then the generations in the order of allocation.
	gens := overview("generation", "name")
	if len(gens) < 3 || gens[0].Generation != nil || gens[0].Count == 0 {
		t.Errorf("by generation, by name: want the objects before tracing first, then the generations: %+v", gens[:min(3, len(gens))])
	}
	if r, ok := find(gens, func(r row) bool { return r.Generation != nil && *r.Generation == rep.LaterGen }); !ok || r.Count < rep.Later || rep.LaterGen == rep.AppGen {
		t.Errorf("by generation: generation %d's row %+v (found %v), want at least the %d Objects Ruby made then (the 2,000 before in generation %d)", rep.LaterGen, r, ok, rep.Later, rep.AppGen)
	} else if n := drilled("generation", r); uint64(n) != r.Count {
		t.Errorf("by generation: the row of %d objects drills down to %d", r.Count, n)
	}
	code, msg := ts.getError(t, "/api/heap/overview?f=1&by=gem")
	if code != http.StatusBadRequest || !strings.Contains(msg, "has no allocation sites (file/line): dump after ObjectSpace.trace_object_allocations_start to group by gem") {
		t.Errorf("by gem on a dump without sites: %d %q", code, msg)
	}
}

// TestHeapDiffPairs: the comparison of two dumps of a real program puts
// first the objects the program says it kept between them, by class and by
// allocation site; bad requests get one message each; and a second server
// on the same dumps (the cache directory shared) reads the comparisons the
// first kept, both ways, rather than making them again.
func TestHeapDiffPairs(t *testing.T) {
	before, after, rep := diffDumps(t)
	cache := t.TempDir()
	ts := newTestServer(t, Options{Files: []string{before, after}, CacheDir: cache})
	for _, by := range []string{"class", "site"} {
		var d wire.HeapDiff
		ts.get(t, "/api/heap/diff?f=1&before=0&top=10&by="+by, &d)
		if len(d.Rows) == 0 || d.Rows[0].Class != "Leaky" || d.Rows[0].Count != rep.Leaky || by == "site" && d.Rows[0].Site != rep.Site {
			t.Errorf("by %s: first row %+v, the program kept %d Leaky from %s", by, d.Rows, rep.Leaky, rep.Site)
		}
	}
	for path, want := range map[string]string{
		"/api/heap/diff?f=1&before=7":         `no file "7"`,
		"/api/heap/diff?f=1&before=0&by=size": `by="size": want one of class, site`,
		"/api/heap/diff?f=1&before=0&top=-1":  `top="-1": want a number from 0 to 1000`,
	} {
		if _, msg := ts.getError(t, path); !strings.Contains(msg, want) {
			t.Errorf("GET %s: %q, want an error saying %s", path, msg, want)
		}
	}

	views := []string{"/api/heap/suspects?f=1&before=0&top=100", "/api/heap/suspects?f=0&before=1&top=100",
		"/api/heap/diff?f=1&before=0&top=100&by=class", "/api/heap/diff?f=0&before=1&top=100&by=site"}
	first := make([]any, len(views))
	for k, v := range views {
		ts.get(t, v, &first[k])
	}
	kept, _ := filepath.Glob(filepath.Join(cache, "heap-pairs", "*.rbscope-pair"))
	if len(kept) != 2 {
		t.Fatalf("comparisons kept: %v, want both ways", kept)
	}
	identity := func(p string) [3]int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return [3]int64{int64(st.Ino), st.Ctim.Sec, st.Ctim.Nsec}
	}
	was := map[string][3]int64{}
	for _, p := range kept {
		was[p] = identity(p)
	}
	ts2 := newTestServer(t, Options{Files: []string{before, after}, CacheDir: cache})
	for k, v := range views {
		var again any
		ts2.get(t, v, &again)
		if !reflect.DeepEqual(first[k], again) {
			t.Errorf("%s reopened differs:\n%v\nfirst:\n%v", v, again, first[k])
		}
	}
	for p, id := range was {
		if identity(p) != id {
			t.Errorf("the comparison kept in %s was made again", p)
		}
	}
}

// TestCutDumps: a dump of rbscope's own cut short, mid-line or at a line
// boundary, is refused, saying so on the page and once on the log; the
// whole dump is served. Ruby's own dump_all, cut at a line boundary,
// cannot be told from a whole one and is served.
func TestCutDumps(t *testing.T) {
	dir := t.TempDir()
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_dump.rb", nil, filepath.Join(dir, "ruby.json"))
	var rep struct{}
	p.WaitReport(t, &rep, 60*time.Second)
	whole := filepath.Join(dir, "rbscope.json")
	dumpHeap(t, p.PID(), whole, false)
	cut := func(src, name string, mid bool) string {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		n := bytes.IndexByte(b[len(b)/2:], '\n') + len(b)/2 + 1
		if mid {
			n += 10
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	midLine := cut(whole, "mid.json", true)
	atLine := cut(whole, "atline.json", false)
	theirs := cut(filepath.Join(dir, "ruby.json"), "theirs.json", false)
	// Compressed, cut anywhere (here mid-way): the stream says so.
	zst := filepath.Join(dir, "rbscope.json.zst")
	dumpHeap(t, p.PID(), zst, false)
	cutZst := cut(zst, "cut.json.zst", true)
	var log bytes.Buffer
	ts := newTestServer(t, Options{Files: []string{whole, midLine, atLine, theirs, cutZst}, Log: &log})
	files := ts.files(t)
	if len(files) != 5 || files[0].State != "ready" || files[3].State != "ready" {
		t.Fatalf("the whole dump and Ruby's cut at a line are served: %+v", files)
	}
	for i, want := range map[int]string{1: `mid\.json: not a usable heap dump: line \d+: invalid JSON`, 2: `atline\.json: not a usable heap dump: line \d+: cut short after \d+ lines`,
		4: `cut\.json\.zst: not a usable heap dump: the zstd stream is cut short \(.*\): dump the process again$`} {
		if files[i].State != "error" || !regexp.MustCompile(want).MatchString(files[i].Error) {
			t.Errorf("page: %+v, want an error matching %s", files[i], want)
		}
		if code, msg := ts.getError(t, fmt.Sprintf("/api/heap/top?f=%d", i)); code != http.StatusUnprocessableEntity || msg != files[i].Error {
			t.Errorf("top of %s: %d %q, want 422 %q", files[i].Name, code, msg, files[i].Error)
		}
	}
	for _, name := range []string{"mid.json:", "atline.json:", "cut.json.zst:"} {
		if n := strings.Count(log.String(), name); n != 1 {
			t.Errorf("the log names %s %d times: %s", name, n, log.String())
		}
	}
}
