package heapdump_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/rubyvm/heapdump"
	"github.com/rbscope/rbscope/internal/target"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/testvm"
)

// dumpReport is what testdata/heap_dump.rb writes about itself.
type dumpReport struct {
	PID         int               `json:"pid"`
	Version     string            `json:"version"`
	Root        string            `json:"root"`
	Known       map[string]string `json:"known"`
	DumpSeconds float64           `json:"dump_seconds"`
}

// dumpObj is what the tests compare of one dump line.
type dumpObj struct {
	Type, Name, Value                  string
	HasValue                           bool
	Class                              uint64
	Refs                               []uint64
	Length, Size, Bytesize, Ivars, Mem uint64
}

// readDump reads a dump_all file into objects by address and roots by name.
func readDump(t *testing.T, r io.Reader, name string) (map[uint64]*dumpObj, map[string][]uint64) {
	t.Helper()
	objs := map[uint64]*dumpObj{}
	roots := map[string][]uint64{}
	rd := heap.NewReader(r, name)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Type == "ROOT" {
			roots[rec.Root] = append(roots[rec.Root], rec.References...)
			continue
		}
		if objs[rec.Address] != nil {
			t.Fatalf("%s: address %#x twice", name, rec.Address)
		}
		objs[rec.Address] = &dumpObj{Type: rec.Type, Name: rec.Name, Value: string(rec.Value), HasValue: rec.HasValue,
			Class: rec.Class, Refs: append([]uint64(nil), rec.References...), Length: rec.Length, Size: rec.Size,
			Bytesize: rec.Bytesize, Ivars: rec.Ivars, Mem: rec.Memsize}
	}
	return objs, roots
}

// fullyDecoded are the types whose references rbscope decodes exactly as
// Ruby's GC marks them.
var fullyDecoded = map[string]bool{"OBJECT": true, "ARRAY": true, "HASH": true, "STRUCT": true, "STRING": true,
	"RATIONAL": true, "COMPLEX": true, "SYMBOL": true, "FLOAT": true, "BIGNUM": true, "REGEXP": true, "MATCH": true}

func parseAddr(t *testing.T, s string) uint64 {
	t.Helper()
	a, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	return a
}

// startDumpProgram runs testdata/heap_dump.rb and waits until its heap is
// as it dumped it (main thread asleep after the last GC).
func startDumpProgram(t *testing.T, rb testruby.Ruby) (*rubyvm.VM, *dumpReport, string) {
	ruby := filepath.Join(t.TempDir(), "ruby-dump.json")
	p := testruby.Start(t, rb, "heap_dump.rb", nil, ruby)
	var rep dumpReport
	p.WaitReport(t, &rep, 60*time.Second)
	vm, _ := testvm.AttachAsleep(t, p.PID(), true)
	return vm, &rep, ruby
}

// TestHeapDumpMatchesDumpAll dumps a known heap from outside and compares
// it with the program's own ObjectSpace.dump_all, on every Ruby installed.
func TestHeapDumpMatchesDumpAll(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			vm, rep, rubyDump := startDumpProgram(t, rb)
			var out bytes.Buffer
			start := time.Now()
			st, ss, err := heapdump.WriteSnapshot(vm, vm.T.(*target.Live), &out, heapdump.Options{})
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("paused %v to copy %d bytes", ss.Paused, ss.Bytes)
			t.Logf("Ruby %s: %d objects, %d roots, %d skipped, %d bytes in %v (dump_all: %.3fs)",
				vm.Version, st.Objects, st.Roots, st.Skipped, st.Bytes, took, rep.DumpSeconds)
			if st.Skipped != 0 || st.SkippedPages != 0 {
				t.Errorf("%d objects and %d pages skipped in a paused process", st.Skipped, st.SkippedPages)
			}
			checkDump(t, &out, st, rep, rubyDump, true)
		})
	}
}

// compareObj says how got differs from want ("" when it does not).
func compareObj(got, want *dumpObj) string {
	var diffs []string
	add := func(f string, args ...any) { diffs = append(diffs, fmt.Sprintf(f, args...)) }
	if got.Type != want.Type {
		add("type %s, want %s", got.Type, want.Type)
	}
	if got.Class != want.Class {
		add("class %#x, want %#x", got.Class, want.Class)
	}
	if got.Length != want.Length || got.Size != want.Size || got.Bytesize != want.Bytesize || got.Ivars != want.Ivars {
		add("length/size/bytesize/ivars %d/%d/%d/%d, want %d/%d/%d/%d", got.Length, got.Size, got.Bytesize, got.Ivars,
			want.Length, want.Size, want.Bytesize, want.Ivars)
	}
	if got.HasValue != want.HasValue || got.Value != want.Value {
		add("value %v %q, want %v %q", got.HasValue, got.Value, want.HasValue, want.Value)
	}
	if fullyDecoded[want.Type] && !slices.Equal(got.Refs, want.Refs) {
		add("references %x, want %x", got.Refs, want.Refs)
	}
	if (want.Type == "STRING" || want.Type == "ARRAY") && got.Mem != want.Mem {
		add("memsize %d, want %d", got.Mem, want.Mem)
	}
	return strings.Join(diffs, "; ")
}

// checkGraph loads rbscope's dump with the heap analyses and checks the
// known holder chains: paths from the roots and dominators, the hash of
// arrays retaining as many objects as in Ruby's own dump (rubyDump).
func checkGraph(t *testing.T, dump []byte, rep *dumpReport, rubyDump string) {
	t.Helper()
	g, err := heap.Load(bytes.NewReader(dump), "rbscope dump")
	if err != nil {
		t.Fatal(err)
	}
	idx := func(k string) int {
		i, ok := g.Lookup(parseAddr(t, rep.Known[k]))
		if !ok {
			t.Fatalf("%s %s not in the graph", k, rep.Known[k])
		}
		return i
	}
	t.Logf("graph: %d objects, %d references, %d dangling", g.Len(), g.NumRefs(), g.Dangling)
	// PathHolder::CONST[0][:target]: Object -> PathHolder -> Array -> Hash -> String.
	target := idx("path_target")
	paths := heap.Paths(g, target, 3)
	if len(paths) == 0 {
		t.Fatalf("no path from the roots to PathHolder::CONST[0][:target]")
	}
	var chain []int
	for _, h := range paths[0].Hops {
		chain = append(chain, h.Index)
	}
	for _, k := range []string{"path_module", "path_array", "path_hash", "path_target"} {
		if !slices.Contains(chain, idx(k)) {
			t.Errorf("path to the target %+v lacks %s", paths[0], k)
		}
	}
	// $dump_root[:hash_of_arrays]["large 0"][0]: the global's hash
	// dominates the hash of arrays, which dominates its arrays.
	d := heap.Dominators(g)
	hoa, arr, str := idx("hash_of_arrays"), idx("hoa_first_array"), idx("hoa_first_string")
	if dom, ok := d.Idom(arr); !ok || dom != hoa {
		t.Errorf("idom(hash_of_arrays[\"large 0\"]) = %d %v, want the hash of arrays %d", dom, ok, hoa)
	}
	if dom, ok := d.Idom(str); !ok || dom != arr {
		t.Errorf("idom of its first string = %d %v, want the array %d", dom, ok, arr)
	}
	if dom, ok := d.Idom(hoa); !ok || dom != idx("root") {
		t.Errorf("idom(hash_of_arrays) = %d %v, want $dump_root %d", dom, ok, idx("root"))
	}
	// Itself, keys, arrays and strings, less the keys that are also
	// literals of the program (Ruby's dump says which).
	f, err := os.Open(rubyDump)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	theirs, err := heap.Load(f, rubyDump)
	if err != nil {
		t.Fatal(err)
	}
	theirHoa, ok := theirs.Lookup(parseAddr(t, rep.Known["hash_of_arrays"]))
	if !ok {
		t.Fatal("the hash of arrays is not in Ruby's dump")
	}
	want := heap.Dominators(theirs).RetainedCount[theirHoa]
	if got := d.RetainedCount[hoa]; got != want || want < 1+23+3*3+20*40 {
		t.Errorf("the hash of arrays retains %d objects, %d in Ruby's own dump", got, want)
	}
	found := false
	for _, r := range d.Top(200) {
		found = found || r.Index == hoa
	}
	if !found {
		t.Errorf("the hash of arrays is not among the 200 biggest retainers")
	}
}

// shapeLines returns a dump's SHAPE lines (3.3+) by shape id.
func shapeLines(t *testing.T, dump []byte) map[uint64]map[string]any {
	t.Helper()
	out := map[uint64]map[string]any{}
	for _, line := range bytes.Split(dump, []byte("\n")) {
		if !bytes.Contains(line, []byte(`"type":"SHAPE"`)) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("SHAPE line %q: %v", line, err)
		}
		out[uint64(m["id"].(float64))] = m
	}
	return out
}

// compareShapes checks that every shape of Ruby's own dump has a SHAPE
// line in rbscope's with the same fields (the program may have made
// more shapes since).
func compareShapes(t *testing.T, mine []byte, rubyDump string) {
	t.Helper()
	b, err := os.ReadFile(rubyDump)
	if err != nil {
		t.Fatal(err)
	}
	theirs, ours := shapeLines(t, b), shapeLines(t, mine)
	if len(theirs) == 0 {
		if len(ours) > 0 {
			t.Errorf("%d SHAPE lines, dump_all wrote none", len(ours))
		}
		return
	}
	bad := 0
	for id, want := range theirs {
		got := ours[id]
		if !reflect.DeepEqual(got, want) {
			bad++
			if bad <= 5 {
				t.Errorf("shape %d: %v, dump_all %v", id, got, want)
			}
		}
	}
	t.Logf("%d of dump_all's %d SHAPE lines compared, %d differ (rbscope wrote %d)", len(theirs), len(theirs), bad, len(ours))
}

// TestHeapDumpOneBadObjectCostsOne makes the decoder of one object of a
// real dump fail as a bug would, in the middle of the walk: that object
// is written with its header and "partial" saying why, the summary
// counts it, and every other object is written as in a clean dump.
func TestHeapDumpOneBadObjectCostsOne(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	vm, rep, _ := startDumpProgram(t, rb)
	dump := func(opt heapdump.Options) (*heapdump.Stats, []byte) {
		var out bytes.Buffer
		st, _, err := heapdump.WriteSnapshot(vm, vm.T.(*target.Live), &out, opt)
		if err != nil {
			t.Fatal(err)
		}
		return st, out.Bytes()
	}
	clean, cleanOut := dump(heapdump.Options{})
	bad := parseAddr(t, rep.Known["path_hash"])
	st, out := dump(heapdump.FailDecoding(heapdump.Options{}, func(a uint64) bool { return a == bad }))
	if st.PartialTotal != 1 || st.Panicked != 1 {
		t.Fatalf("%d partial objects (%d panics), want 1: %v", st.PartialTotal, st.Panicked, st.Partial)
	}
	if cv := st.Caveats(); len(cv) == 0 || !strings.Contains(cv[0], "1 objects written partially") || !strings.Contains(cv[0], "injected failure") {
		t.Errorf("caveats %q do not count the partial object and its reason", cv)
	}
	if clean.PartialTotal != 0 {
		t.Errorf("the clean dump has %d partial objects: %v", clean.PartialTotal, clean.Partial)
	}
	if st.Objects != clean.Objects {
		t.Errorf("%d objects written, %d in the clean dump", st.Objects, clean.Objects)
	}
	mine, _ := readDump(t, bytes.NewReader(out), "dump with a failure")
	want, _ := readDump(t, bytes.NewReader(cleanOut), "clean dump")
	for a, o := range want {
		got := mine[a]
		switch {
		case got == nil:
			t.Errorf("%#x (%s) is missing", a, o.Type)
		case a == bad:
			if got.Type != "HASH" || got.Class != o.Class {
				t.Errorf("the partial object is %s of class %#x, want HASH of class %#x", got.Type, got.Class, o.Class)
			}
		default:
			if msg := compareObj(got, o); msg != "" {
				t.Errorf("%#x: %s", a, msg)
			}
		}
	}
	line := lineOf(out, bad)
	if !strings.Contains(line, `"partial":"decoder failed: injected failure`) {
		t.Errorf("the partial object's line does not say why: %s", line)
	}
	if !json.Valid([]byte(line)) {
		t.Errorf("invalid JSON: %s", line)
	}
}

// lineOf returns the line of the object at addr in a dump.
func lineOf(dump []byte, addr uint64) string {
	key := fmt.Sprintf(`{"address":"%#x"`, addr)
	for _, l := range bytes.Split(dump, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(key)) {
			return string(l)
		}
	}
	return ""
}

// checkDump compares rbscope's dump of heap_dump.rb's heap (out, with its
// stats st) with the program's own dump_all (rubyDump) and report; the
// dump has a machine-context root when machineContext is set.
func checkDump(t *testing.T, out *bytes.Buffer, st *heapdump.Stats, rep *dumpReport, rubyDump string, machineContext bool) {
	t.Helper()
	if st.Bytes != int64(out.Len()) {
		t.Errorf("stats say %d bytes, %d written", st.Bytes, out.Len())
	}
	mine, myRoots := readDump(t, bytes.NewReader(out.Bytes()), "rbscope dump")
	f, err := os.Open(rubyDump)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	theirs, _ := readDump(t, f, rubyDump)
	if uint64(len(mine)) != st.Objects+st.Shapes {
		t.Errorf("%d object and shape lines, stats say %d and %d", len(mine), st.Objects, st.Shapes)
	}

	// Nearly the same objects overall (the dump and the report
	// allocate, the GC after them frees).
	common := 0
	compareShapes(t, out.Bytes(), rubyDump)
	for a, o := range theirs {
		if o.Type == "SHAPE" { // compared above
			delete(theirs, a)
			delete(mine, a)
		}
	}
	for a := range theirs {
		if mine[a] != nil {
			common++
		}
	}
	t.Logf("dump_all: %d objects, rbscope: %d, common: %d", len(theirs), len(mine), common)
	if float64(common) < 0.99*float64(len(theirs)) {
		t.Errorf("only %d of dump_all's %d objects in rbscope's dump", common, len(theirs))
	}

	// Exactly the same for everything reachable from $dump_root.
	root := parseAddr(t, rep.Root)
	if !slices.Contains(myRoots["global_tbl"], root) {
		t.Errorf("$dump_root %#x not in the global_tbl root (%d references)", root, len(myRoots["global_tbl"]))
	}
	for _, name := range []string{"vm", "machine_context"} {
		if len(myRoots[name]) == 0 && (name == "vm" || machineContext) {
			t.Errorf("no %q root", name)
		}
	}
	seen := map[uint64]bool{root: true}
	queue := []uint64{root}
	compared, bad := 0, 0
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		want, got := theirs[a], mine[a]
		if want == nil {
			t.Fatalf("%#x not in dump_all's dump", a)
		}
		if got == nil {
			bad++
			t.Errorf("%#x (%s) not in rbscope's dump", a, want.Type)
			continue
		}
		compared++
		if msg := compareObj(got, want); msg != "" {
			bad++
			if bad < 20 {
				t.Errorf("%#x %s: %s", a, want.Type, msg)
			}
		}
		if !fullyDecoded[want.Type] {
			continue
		}
		for _, r := range want.Refs {
			if !seen[r] {
				seen[r] = true
				queue = append(queue, r)
			}
		}
	}
	t.Logf("%d objects reachable from $dump_root compared, %d differ", compared, bad)
	if compared < 900 {
		t.Errorf("only %d objects compared", compared)
	}

	// Classes: superclass and name as dump_all says; references a
	// subset of Ruby's (method tables are not decoded).
	for _, k := range []string{"holder_class", "path_module"} {
		a := parseAddr(t, rep.Known[k])
		got, want := mine[a], theirs[a]
		if got == nil || want == nil {
			t.Errorf("%s %#x missing (rbscope %v, dump_all %v)", k, a, got != nil, want != nil)
			continue
		}
		if got.Type != want.Type || got.Name != want.Name || got.Class != want.Class {
			t.Errorf("%s: rbscope %s %q class %#x, dump_all %s %q class %#x", k, got.Type, got.Name, got.Class, want.Type, want.Name, want.Class)
		}
		for _, r := range got.Refs {
			if !slices.Contains(want.Refs, r) {
				t.Errorf("%s: reference %#x not in dump_all's %x", k, r, want.Refs)
			}
		}
	}
	pathArray := parseAddr(t, rep.Known["path_array"])
	if !slices.Contains(mine[parseAddr(t, rep.Known["path_module"])].Refs, pathArray) {
		t.Errorf("PathHolder does not reference its constant CONST")
	}

	checkGraph(t, out.Bytes(), rep, rubyDump)
}

// TestSnapshotAfterTheHeapGrew: a VM opened on a process that then maps
// more heap (a program allocating 300,000 Strings after rbscope attached)
// dumps it from a snapshot taken afterwards, whole: the new pages are read
// against the snapshot's mappings, not refused as a layout that does not
// fit (read against the mappings of the opening, 9 of 12 snapshots of a
// program still growing its heap were); and the dump holds at least the
// Strings the program counts alive.
func TestSnapshotAfterTheHeapGrew(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			done := filepath.Join(t.TempDir(), "grown")
			program := fmt.Sprintf(`
				go = false
				trap("USR1") { go = true }
				$stdout.puts(format(%q, Process.pid)); $stdout.flush
				sleep 0.01 until go
				$keep = Array.new(300_000) { |i| "grown-#{i}" }
				GC.start
				GC.disable
				File.write(%q, ObjectSpace.count_objects[:T_STRING].to_s)
				sleep`, `{"pid": %d}`, done)
			var rep struct{ PID int }
			pid := testruby.StartInline(t, rb, program, &rep)
			_, vm := testvm.Attach(t, pid)
			if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			var strings int
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if b, err := os.ReadFile(done); err == nil && len(b) > 0 {
					if strings, err = strconv.Atoi(string(b)); err != nil {
						t.Fatal(err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the program did not grow its heap within 60 s")
				}
			}
			var out bytes.Buffer
			st, _, err := heapdump.WriteSnapshot(vm, vm.T.(*target.Live), &out, heapdump.Options{})
			if err != nil {
				t.Fatalf("snapshot after the heap grew: %v", err)
			}
			got := bytes.Count(out.Bytes(), []byte(`"type":"STRING"`))
			t.Logf("Ruby %s: %d objects, %d Strings (the program counts %d)", vm.Version, st.Objects, got, strings)
			if got < strings || strings < 300_000 {
				t.Errorf("the dump holds %d Strings, the program counts %d (300,000 of them made after the VM was opened)", got, strings)
			}
		})
	}
}
