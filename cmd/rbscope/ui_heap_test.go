package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/ui/uitest"
	"github.com/rbscope/rbscope/internal/wire"
)

// heapGraphDump runs testdata/heap_graph.rb and returns its dump and report.
func heapGraphDump(t *testing.T, dir string) (string, heapGraphReport) {
	t.Helper()
	dump := filepath.Join(dir, "graph.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_graph.rb", nil, dump)
	var rep heapGraphReport
	p.WaitReport(t, &rep, 60*time.Second)
	return dump, rep
}

type heapGraphReport struct {
	Hash string `json:"hash"`
	Path struct {
		Module, Array, Hash, Target, Value string
	} `json:"path"`
}

// TestCutDumps: a dump of rbscope's own is read whole by other readers of
// dump_all's format; cut short at a line boundary, heap top refuses it,
// saying so (the page's answer to cut dumps: internal/ui's TestCutDumps).
func TestCutDumps(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	dir := t.TempDir()
	p, _ := startHeapDumpProgram(t, rb, dir)
	whole := filepath.Join(dir, "rbscope.json")
	_, stderr, code := rbscope(t, "heap", "dump", "-p", strconv.Itoa(p.PID()), "-o", whole)
	if code != 0 {
		t.Fatalf("heap dump: exit %d: %s", code, stderr)
	}
	// Readers of dump_all's format read the whole dump, its end line a
	// root like the others: Debian's heapy (which counts every line, ROOT
	// and SHAPE lines too) and a reader that counts objects only.
	m := regexp.MustCompile(`: (\d+) objects and \d+ roots`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("heap dump said %q", stderr)
	}
	objects, _ := strconv.Atoi(m[1])
	b, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	needCommand(t, "heapy")
	if out, err := exec.Command("heapy", "read", whole).CombinedOutput(); err != nil || !strings.Contains(string(out), fmt.Sprintf("Count: %d\n", bytes.Count(b, []byte("\n")))) {
		t.Errorf("heapy read: %v, want Count: %d (every line):\n%s", err, bytes.Count(b, []byte("\n")), out)
	}
	skipRoots := `require "json"; n = 0; File.foreach(ARGV[0]) { |l| n += 1 unless %w[ROOT SHAPE].include?(JSON.parse(l)["type"]) }; print n`
	if out, err := exec.Command(rb.Bin, "-e", skipRoots, whole).Output(); err != nil || string(out) != strconv.Itoa(objects) {
		t.Errorf("a reader skipping ROOT lines counts %q objects (%v), want %d", out, err, objects)
	}
	b = b[:bytes.IndexByte(b[len(b)/2:], '\n')+len(b)/2+1]
	atLine := filepath.Join(dir, "atline.json")
	if err := os.WriteFile(atLine, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := rbscope(t, "heap", "top", atLine); code == 0 || !strings.Contains(stderr, "cut short") {
		t.Errorf("heap top on rbscope's dump cut at a line boundary: exit %d, %s", code, stderr)
	}
	if _, stderr, code := rbscope(t, "heap", "top", whole); code != 0 {
		t.Errorf("heap top on the whole dump: exit %d, %s", code, stderr)
	}
}

// TestUIHeapAgainstCLI holds every heap view of the page to the command
// line's answer on the dump of a real program.
func TestUIHeapAgainstCLI(t *testing.T) {
	dir := t.TempDir()
	dump, rep := heapGraphDump(t, dir)
	// A dump cut mid-line (cut at a line boundary, Ruby's own dump would
	// be a valid shorter one: TestCutDumps).
	b, _ := os.ReadFile(dump)
	bad := filepath.Join(dir, "cut.json")
	os.WriteFile(bad, b[:bytes.IndexByte(b[len(b)/2:], '\n')+len(b)/2+10], 0o600)
	s := startUI(t, dump, bad)
	files := s.waitLoaded(t)
	if len(files) != 2 || files[0].State != "ready" || files[0].Kind != "heap" || !files[0].Built {
		t.Fatalf("files: %+v", files)
	}
	// The cut dump: one message, on the page and on stderr; the rest is served.
	if files[1].State != "error" || !regexp.MustCompile(`^.*cut\.json: not a usable heap dump: line \d+: invalid JSON`).MatchString(files[1].Error) {
		t.Errorf("cut dump: %+v", files[1])
	}
	if n := strings.Count(s.errors(), "cut.json"); n != 1 {
		t.Errorf("stderr names the cut dump %d times: %s", n, s.errors())
	}
	if st, err := os.Stat(filepath.Join(dir, ".graph.json.rbscope-index")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("index beside the dump: %v %v", st, err)
	}

	// top: the same document as heap top --json.
	stdout, stderr, code := rbscope(t, "heap", "top", dump, "--top", "100", "--json")
	if code != 0 {
		t.Fatalf("heap top: %s", stderr)
	}
	var cliTop, uiTop wire.HeapTop
	json.Unmarshal([]byte(stdout), &cliTop)
	s.get(t, "/api/heap/top?f=0&n=100", &uiTop)
	if len(cliTop.Retainers) != 100 || fmt.Sprint(cliTop) != fmt.Sprint(uiTop) {
		t.Errorf("top differs from heap top --json:\nui  %+v\ncli %+v", uiTop, cliTop)
	}

	// overview: the rows add up to the dump; retained by class bounds.
	for _, by := range []string{"class", "type"} {
		var ov struct {
			Objects   int    `json:"objects"`
			Bytes     uint64 `json:"bytes"`
			Reachable uint64 `json:"reachable_bytes"`
			Page      uiPage[uiGroup]
		}
		s.get(t, "/api/heap/overview?f=0&limit=1000&by="+by, &ov)
		var count, shallow, retained uint64
		for k, r := range ov.Page.Rows {
			count += r.Count
			shallow += r.Shallow
			retained += r.Retained
			if k > 0 && r.Retained > ov.Page.Rows[k-1].Retained {
				t.Errorf("by %s: rows not by retained size", by)
			}
			if r.Retained > ov.Reachable {
				t.Errorf("by %s: %s %s retains %d, more than all reachable %d", by, r.Class, r.Type, r.Retained, ov.Reachable)
			}
		}
		if ov.Page.Total > 1000 || len(ov.Page.Rows) != ov.Page.Total || int(count) != cliTop.Objects || shallow != cliTop.Bytes ||
			ov.Objects != cliTop.Objects || ov.Bytes != cliTop.Bytes || ov.Reachable != cliTop.ReachableBytes {
			t.Errorf("by %s: %d rows, %d objects %d bytes; heap top says %d objects %d bytes", by, ov.Page.Total, count, shallow, cliTop.Objects, cliTop.Bytes)
		}
		if by == "type" && retained < ov.Reachable {
			// Every reachable object has one type: by type, the rows'
			// retained sizes cover everything reachable (nested ones once).
			t.Errorf("by type: retained adds up to %d, want at least %d", retained, ov.Reachable)
		}
	}

	// object: each top retainer's retained size, count and dominator as
	// heap top says; the known Hash is listed among its class's objects.
	for _, r := range cliTop.Retainers[:20] {
		var o struct {
			Object    uiObject
			Dominator *uiObject
			DomRoots  bool `json:"dominated_by_roots"`
			Dominated uiPage[uiObject]
		}
		s.get(t, "/api/heap/object?f=0&addr="+r.Address, &o)
		dom := "root"
		if o.Dominator != nil {
			dom = o.Dominator.Address
		}
		if o.Object.HeapObject != r.HeapObject || o.Object.Retained != r.Retained || o.Object.RetainedCount != r.Count || dom != r.Dominator || (dom == "root") != o.DomRoots {
			t.Errorf("object %s: %+v dominator %s; heap top: %+v", r.Address, o.Object, dom, r)
		}
		var sum uint64
		for _, c := range o.Dominated.Rows {
			sum += c.Retained
		}
		if o.Dominated.Total <= len(o.Dominated.Rows) && sum+r.Memsize != r.Retained {
			t.Errorf("object %s: dominated objects retain %d + self %d, want %d", r.Address, sum, r.Memsize, r.Retained)
		}
	}
	var hashObj struct {
		Object    uiObject
		Dominated uiPage[uiObject]
	}
	s.get(t, "/api/heap/object?f=0&limit=5&addr="+rep.Hash, &hashObj)
	if hashObj.Object.Class != "Hash" || hashObj.Dominated.Total < 1000 || len(hashObj.Dominated.Rows) != 5 {
		t.Errorf("the Hash of 1000 Strings: %+v, dominates %d", hashObj.Object, hashObj.Dominated.Total)
	}
	var hashes struct{ Page uiPage[uiGroup] }
	s.get(t, "/api/heap/overview?f=0&limit=1000&sort=name", &hashes)
	gi := slices.IndexFunc(hashes.Page.Rows, func(g uiGroup) bool { return g.Class == "Hash" && g.Type == "HASH" })
	if gi < 0 {
		t.Fatalf("no Hash row")
	}
	var objs struct {
		Group uiGroup
		Page  uiPage[uiObject]
	}
	s.get(t, fmt.Sprintf("/api/heap/objects?f=0&by=class&group=%d&limit=1000", hashes.Page.Rows[gi].ID), &objs)
	if uint64(objs.Page.Total) != objs.Group.Count || !slices.ContainsFunc(objs.Page.Rows, func(o uiObject) bool { return o.Address == rep.Hash }) ||
		objs.Group.Retained < hashObj.Object.Retained {
		t.Errorf("the Hash row: %+v (%d listed) lacks %s or retains less than it", objs.Group, len(objs.Page.Rows), rep.Hash)
	}

	// paths ignoring holders: heap path --ignore's, through none of them
	// (ignoring the Hash, the target's only holder, leaves none).
	for _, ignore := range []string{rep.Path.Hash, rep.Path.Array, rep.Path.Module + "," + rep.Path.Array} {
		stdout, stderr, code := rbscope(t, "heap", "path", dump, rep.Path.Target, "--all", "5", "--json", "--ignore", ignore)
		if code != 0 {
			t.Fatalf("heap path --ignore %s: %s", ignore, stderr)
		}
		var cli wire.HeapPath
		json.Unmarshal([]byte(stdout), &cli)
		var ui struct {
			Ignored []string
			Paths   []wire.RootPath
		}
		s.get(t, "/api/heap/paths?f=0&n=5&addr="+rep.Path.Target+"&ignore="+ignore, &ui)
		hops := func(ps []wire.RootPath) (out []string) {
			for _, p := range ps {
				for _, h := range p.Hops {
					out = append(out, h.Address)
				}
				out = append(out, "|")
			}
			return out
		}
		if !slices.Equal(hops(ui.Paths), hops(cli.Paths)) || strings.Join(ui.Ignored, ",") != ignore || strings.Join(cli.Ignored, ",") != ignore {
			t.Errorf("ignoring %s: the page's paths %v (ignored %v), heap path's %v (ignored %v)", ignore, hops(ui.Paths), ui.Ignored, hops(cli.Paths), cli.Ignored)
		}
		for _, a := range hops(cli.Paths) {
			if strings.Contains(ignore, a) {
				t.Errorf("ignoring %s: a path passes through %s", ignore, a)
			}
		}
		if ignore == rep.Path.Hash && len(cli.Paths) != 0 {
			t.Errorf("ignoring the Hash, the target's only holder: %v", hops(cli.Paths))
		}
	}

	// paths: heap path --json's paths, hop for hop, dominators marked.
	stdout, stderr, code = rbscope(t, "heap", "path", dump, rep.Path.Target, "--all", "3", "--json")
	if code != 0 {
		t.Fatalf("heap path: %s", stderr)
	}
	var cliPath wire.HeapPath
	json.Unmarshal([]byte(stdout), &cliPath)
	var uiPath struct {
		Object  uiObject
		Holders int
		Paths   []struct {
			Root string
			Hops []struct {
				wire.HeapObject
				Dominator bool
			}
		}
	}
	s.get(t, "/api/heap/paths?f=0&n=3&addr="+rep.Path.Target, &uiPath)
	if uiPath.Object.HeapObject != cliPath.HeapObject || uiPath.Holders != len(cliPath.Holders) || len(uiPath.Paths) != len(cliPath.Paths) || len(cliPath.Paths) == 0 {
		t.Fatalf("paths: %+v\nheap path: %+v", uiPath, cliPath)
	}
	sawHash := false
	for k, p := range cliPath.Paths {
		up := uiPath.Paths[k]
		if up.Root != p.Root || len(up.Hops) != len(p.Hops) {
			t.Fatalf("path %d: %+v, heap path %+v", k, up, p)
		}
		for j, h := range p.Hops {
			if up.Hops[j].HeapObject != h {
				t.Errorf("path %d hop %d: %+v, heap path %+v", k, j, up.Hops[j].HeapObject, h)
			}
			if h.Address == rep.Path.Hash {
				sawHash = true
				if !up.Hops[j].Dominator {
					t.Errorf("the Hash, the target's only holder, is not marked a dominator")
				}
			}
			if j == len(p.Hops)-1 && up.Hops[j].Dominator {
				t.Errorf("the target marked its own dominator")
			}
		}
	}
	if !sawHash {
		t.Errorf("no path through the Hash %s", rep.Path.Hash)
	}
	var target struct{ Referrers uiPage[uiObject] }
	s.get(t, "/api/heap/object?f=0&addr="+rep.Path.Target, &target)
	var refs []string
	for _, r := range target.Referrers.Rows {
		refs = append(refs, r.Address)
	}
	if !slices.Equal(refs, cliPath.Holders) {
		t.Errorf("referrers %v, heap path's holders %v", refs, cliPath.Holders)
	}

	// A second server reuses the index while the dump is unchanged, and
	// builds it again once the dump changes.
	s2 := startUI(t, dump)
	if f := s2.waitLoaded(t); f[0].Built || f[0].State != "ready" {
		t.Errorf("second open: %+v, want the index reused", f[0])
	}
	var top2 wire.HeapTop
	s2.get(t, "/api/heap/top?f=0&n=100", &top2)
	if fmt.Sprint(top2) != fmt.Sprint(cliTop) {
		t.Errorf("top from the reused index differs")
	}
	// Every view answers from the index as from the dump: the overview's
	// rows (kept in the index), a group's objects, an object's referrers
	// and dominated objects (the referrers and the dominator tree kept).
	views := []string{"/api/heap/overview?f=0&limit=1000&by=class", "/api/heap/overview?f=0&limit=1000&by=type&sort=count",
		"/api/heap/objects?f=0&by=class&group=0", "/api/heap/objects?f=0&by=type&group=1",
		"/api/heap/object?f=0&addr=" + rep.Path.Target, "/api/heap/object?f=0&addr=" + rep.Path.Hash,
		"/api/heap/paths?f=0&addr=" + rep.Path.Target, "/api/heap/waste?f=0"}
	sameViews := func(what string, s2 *uiServer) {
		t.Helper()
		for _, v := range views {
			var a, b any
			s.get(t, v, &a)
			s2.get(t, v, &b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("%s: %s differs:\n%v\nfrom the dump:\n%v", what, v, b, a)
			}
		}
	}
	sameViews("second open", s2)
	// A cut index is not trusted: the dump is indexed again. (Put in
	// place as rbscope writes an index, by a rename: the servers running
	// use the index file they opened, mapped into memory.)
	index := filepath.Join(dir, ".graph.json.rbscope-index")
	ib, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(index+".cut", ib[:len(ib)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(index+".cut", index); err != nil {
		t.Fatal(err)
	}
	sCut := startUI(t, dump)
	if f := sCut.waitLoaded(t); !f[0].Built || f[0].State != "ready" {
		t.Errorf("open with a cut index: %+v, want the index built again", f[0])
	}
	sameViews("open with a cut index", sCut)
	// Nor one that others may read (not as rbscope writes an index).
	if err := os.Chmod(index, 0o644); err != nil {
		t.Fatal(err)
	}
	if f := startUI(t, dump).waitLoaded(t); !f[0].Built || f[0].State != "ready" {
		t.Errorf("open with an index of mode 0644: %+v, want the index built again", f[0])
	}
	if st, err := os.Stat(index); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the index built again: %v %v, want mode 0600", st, err)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(dump, later, later)
	s3 := startUI(t, dump)
	if f := s3.waitLoaded(t); !f[0].Built {
		t.Errorf("open after the dump changed: %+v, want the index built again", f[0])
	}
}

// TestUIHeapDiff: the page's comparison of two dumps of a real program is
// heap diff --json's, by class and by allocation site, and its largest row
// is the objects the program says it kept between the dumps (the view's
// bad requests and kept comparisons: internal/ui's TestHeapDiffPairs).
func TestUIHeapDiff(t *testing.T) {
	before, after, rep := diffDumps(t)
	s := startUI(t, before, after)
	if files := s.waitLoaded(t); len(files) != 2 || files[0].State != "ready" || files[1].State != "ready" {
		t.Fatalf("files: %+v", files)
	}
	for _, by := range []string{"class", "site"} {
		stdout, stderr, code := rbscope(t, "heap", "diff", before, after, "--json", "--by", by, "--top", "10")
		if code != 0 {
			t.Fatalf("heap diff --by %s: %s", by, stderr)
		}
		var cli, ui wire.HeapDiff
		if err := json.Unmarshal([]byte(stdout), &cli); err != nil {
			t.Fatal(err)
		}
		s.get(t, "/api/heap/diff?f=1&before=0&top=10&by="+by, &ui)
		if !reflect.DeepEqual(cli, ui) {
			t.Errorf("by %s: the page's diff differs from heap diff --json:\nui  %+v\ncli %+v", by, ui, cli)
		}
		if len(ui.Rows) == 0 || ui.Rows[0].Class != "Leaky" || ui.Rows[0].Count != rep.Leaky || by == "site" && ui.Rows[0].Site != rep.Site {
			t.Errorf("by %s: first row %+v, the program kept %d Leaky from %s", by, ui.Rows, rep.Leaky, rep.Site)
		}
	}
}

// TestUIHeapPivots: in Chromium, the overview of a dump with allocation
// sites offers every grouping and shows the gem's and the app's rows, and
// the generations by name; a dump without sites says how to get them. The
// rows' contents against the program: internal/ui's TestHeapPivots.
func TestUIHeapPivots(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "gems.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_gems.rb", nil, dump, dir)
	var rep struct {
		LaterGen uint64 `json:"later_generation"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	plain, _ := heapGraphDump(t, dir)
	s := startUI(t, dump, plain)
	s.waitLoaded(t)
	ctx, problems := browser(t)
	visit(t, ctx, s, "#/heap/0/overview?by=generation&sort=name", "heap-overview-generation")
	if text := eval[string](t, ctx, `document.getElementById("rows").innerText`); !strings.Contains(text, "(before tracing)") || !strings.Contains(text, fmt.Sprintf("generation %d", rep.LaterGen)) {
		t.Errorf("the page by generation:\n%.2000s", text)
	}
	visit(t, ctx, s, "#/heap/0/overview?by=gem", "heap-overview-gem")
	if links := eval[[]string](t, ctx, `[...document.querySelectorAll("#pivots a")].map(a => a.innerText)`); strings.Join(links, ",") != "class,type,allocation site,gem,GC generation" {
		t.Errorf("the page's groupings: %q", links)
	}
	if text := eval[string](t, ctx, `document.getElementById("rows").innerText`); !strings.Contains(text, "fakegem-1.2.3") || !strings.Contains(text, "(app)") {
		t.Errorf("the page by gem:\n%s", text)
	}
	visit(t, ctx, s, "#/heap/1/overview", "heap-overview-no-sites")
	if text := eval[string](t, ctx, `document.getElementById("pivots").innerText`); strings.Contains(text, "gem ·") || !strings.Contains(text, "trace_object_allocations_start") {
		t.Errorf("the page's groupings of a dump without sites: %q", text)
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}

// TestUIHeapWaste: in Chromium, the Waste view shows the value a program
// holds in 4,000 Strings first, and its oversized Arrays, as the view's
// API answers them (held to the program: internal/ui's TestHeapWaste).
func TestUIHeapWaste(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "waste.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_waste.rb", nil, dump)
	var rep struct {
		Value      string `json:"value"`
		OverLength uint64 `json:"oversized_length"`
	}
	p.WaitReport(t, &rep, 60*time.Second)
	s := startUI(t, dump)
	s.waitLoaded(t)
	var w struct {
		Strings   []struct{ Count uint64 }
		Oversized []struct{ Spare uint64 }
	}
	s.get(t, "/api/heap/waste?f=0&n=10", &w)
	if len(w.Strings) == 0 || len(w.Oversized) == 0 {
		t.Fatalf("waste: %+v", w)
	}
	ctx, problems := browser(t)
	visit(t, ctx, s, "#/heap/0/waste", "heap-waste")
	if rows := cells(t, ctx, "#dup-strings"); len(rows) == 0 || !strings.Contains(rows[0][0], rep.Value) || rows[0][1] != commas(w.Strings[0].Count) {
		t.Errorf("the page's duplicate Strings: %q", rows)
	}
	// The page lists 50 (its default), the largest first.
	if rows := cells(t, ctx, "#oversized"); len(rows) != 50 || rows[0][3] != commas(rep.OverLength) || rows[0][5] != commas(w.Oversized[0].Spare) {
		t.Errorf("the page's oversized collections: %q", rows)
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}

// TestUIDomTree: the dominator tree's roots' largest child is heap top
// --json's first retainer, and the tree renders in Chromium (the tree's
// sums, a level a request: internal/ui's TestDomTree).
func TestUIDomTree(t *testing.T) {
	dump, _ := heapGraphDump(t, t.TempDir())
	s := startUI(t, dump)
	s.waitLoaded(t)
	stdout, _, code := rbscope(t, "heap", "top", dump, "--top", "5", "--json")
	var top wire.HeapTop
	if code != 0 || json.Unmarshal([]byte(stdout), &top) != nil {
		t.Fatalf("heap top: %s", stdout)
	}
	var root struct {
		ReachableBytes uint64 `json:"reachable_bytes"`
		Objects        uiPage[struct{ Address string }]
	}
	s.get(t, "/api/heap/domtree?f=0&limit=1", &root)
	if len(root.Objects.Rows) == 0 || root.Objects.Rows[0].Address != top.Retainers[0].Address || root.ReachableBytes != top.ReachableBytes {
		t.Errorf("the roots' first child %+v, %d reachable bytes; heap top's first %s, %d reachable bytes", root.Objects.Rows, root.ReachableBytes, top.Retainers[0].Address, top.ReachableBytes)
	}
	ctx, problems := browser(t)
	visit(t, ctx, s, "#/heap/0/domtree", "heap-domtree")
	if rows := cells(t, ctx, "#dom-children"); len(rows) == 0 || rows[0][0] != top.Retainers[0].Address {
		t.Errorf("the page's dominator tree: %q", rows)
	}
	visit(t, ctx, s, "#/heap/0/domtree?addr="+top.Retainers[0].Address+"&by=class", "heap-domtree-node-by-class")
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}

// TestUIMergedPaths: the merged paths of a program's 5,000 leaked objects
// (one class, held in a global Array) are one chain, the one heap path
// gives for the last of them, every object on it passing all 5,000; in
// Chromium too (a node's sums: internal/ui's TestPathsAndMerged).
func TestUIMergedPaths(t *testing.T) {
	_, after, rep := diffDumps(t)
	s := startUI(t, after)
	s.waitLoaded(t)
	group := uitest.ClassGroup(t, s.get, 0, "Leaky")
	m := uitest.GetMerged(t, s.get, 0, group)
	stdout, _, code := rbscope(t, "heap", "path", after, rep.LastLeaky, "--json")
	var path wire.HeapPath
	if code != 0 || json.Unmarshal([]byte(stdout), &path) != nil || len(path.Paths) == 0 {
		t.Fatalf("heap path: %s", stdout)
	}
	var hops []string
	for _, h := range path.Paths[0].Hops[:len(path.Paths[0].Hops)-1] {
		hops = append(hops, h.Address)
	}
	uitest.CheckOneChain(t, m, rep.Leaky, path.Paths[0].Root, hops)
	ctx, problems := browser(t)
	visit(t, ctx, s, fmt.Sprintf("#/heap/0/merged?by=class&group=%d", group), "heap-merged")
	if text := eval[string](t, ctx, `document.getElementById("merged").innerText`); !strings.Contains(text, commas(uint64(rep.Leaky))) {
		t.Errorf("the page's merged paths:\n%s", text)
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}

// diffReport is what testdata/heap_graph_diff.rb says of its two dumps.
type diffReport struct {
	Leaky     uint64 `json:"leaky"`
	Site      string `json:"site"`
	LastLeaky string `json:"last_leaky"`
}

// diffDumps has heap_graph_diff.rb dump its heap before and after keeping
// its Leaky objects, and returns both dumps and its report.
func diffDumps(t *testing.T) (before, after string, rep diffReport) {
	t.Helper()
	dir := t.TempDir()
	before, after = filepath.Join(dir, "before.json"), filepath.Join(dir, "after.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "heap_graph_diff.rb", nil, before, after)
	p.WaitReport(t, &rep, 60*time.Second)
	return before, after, rep
}
