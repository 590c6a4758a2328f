package ui

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rbscope/rbscope/internal/crash"
	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/output"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/wire"
)

// maxLimit bounds a page of rows.
const maxLimit = 1000

func (s *Server) routes() {
	static, _ := fs.Sub(assets, "assets")
	s.mux.HandleFunc("GET /{$}", s.page)
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /api/files", s.apiFiles)
	s.mux.HandleFunc("POST /api/upload", s.apiUpload)
	s.mux.HandleFunc("GET /api/heap/overview", s.heapHandler(apiOverview))
	s.mux.HandleFunc("GET /api/heap/objects", s.heapHandler(apiObjects))
	s.mux.HandleFunc("GET /api/heap/object", s.heapHandler(apiObject))
	s.mux.HandleFunc("GET /api/heap/paths", s.heapHandler(apiPaths))
	s.mux.HandleFunc("GET /api/heap/top", s.heapHandler(apiTop))
	s.mux.HandleFunc("GET /api/heap/domtree", s.heapHandler(apiDomTree))
	s.mux.HandleFunc("GET /api/heap/merged", s.heapHandler(apiMerged))
	s.mux.HandleFunc("GET /api/heap/diff", s.heapDiff)
	s.mux.HandleFunc("GET /api/heap/suspects", s.heapSuspects)
	s.mux.HandleFunc("GET /api/heap/waste", s.heapHandler(apiWaste))
	s.mux.HandleFunc("GET /api/profile/functions", s.profileHandler(apiFunctions))
	s.mux.HandleFunc("GET /api/profile/tree", s.profileHandler(apiTree))
	s.mux.HandleFunc("GET /api/profile/sandwich", s.profileHandler(apiSandwich))
	s.mux.HandleFunc("GET /api/profile/cuts", s.profileHandler(apiCuts))
	s.mux.HandleFunc("GET /api/profile/timeline", s.profileHandler(apiTimeline))
	s.mux.HandleFunc("GET /api/profile/diff", s.profileDiff)
	s.mux.HandleFunc("GET /api/profile/flame.svg", s.flameSVG)
	s.mux.HandleFunc("GET /api/profile/stackchart.svg", s.stackChartSVG)
	s.mux.HandleFunc("GET /api/crashes", s.apiCrashes)
	s.mux.HandleFunc("GET /api/crash", s.apiCrash)
	s.mux.HandleFunc("GET /pprof/{id}/{rest...}", s.servePprof)
	// pprof's pages name no icon: the browser asks for this one.
	s.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s.mux.HandleFunc("GET /api/live", s.apiLive)
	s.mux.HandleFunc("POST /api/live/stack", s.apiLiveStack)
	s.mux.HandleFunc("POST /api/live/heap", s.apiLiveHeap)
	s.mux.HandleFunc("POST /api/live/record", s.apiLiveRecord)
}

// pageTmpl is the page's template, parsed when first served: parsing it
// costs about a millisecond that every other command would pay at start.
var pageTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.ParseFS(assets, "assets/index.html"))
})

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := pageTmpl().Execute(&b, map[string]string{"CSRF": s.guard.csrf}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes())
}

// apiError is the answer of a request that failed: one message.
type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func fail(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, apiError{Error: fmt.Sprintf(format, args...)})
}

// fileInfo is a row of /api/files.
type fileInfo struct {
	ID    int    `json:"id"`
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	State string `json:"state"` // loading, ready, error
	Error string `json:"error,omitempty"`
	// Objects (heap) or Samples (profile) once ready.
	Objects int     `json:"objects,omitempty"`
	Samples int     `json:"samples,omitempty"`
	Seconds float64 `json:"load_seconds,omitempty"`
	Built   bool    `json:"index_built,omitempty"`
}

func (f *file) info() fileInfo {
	fi := fileInfo{ID: f.ID, Name: f.Name, State: "loading"}
	select {
	case <-f.done:
	default:
		return fi
	}
	fi.Kind, fi.Seconds, fi.Built = f.kind, f.took.Seconds(), f.built
	switch {
	case f.err != nil:
		fi.State, fi.Error = "error", oneLine(f.err.Error())
	case f.heap != nil:
		fi.State, fi.Objects = "ready", f.heap.g.Len()
	case f.prof != nil:
		fi.State, fi.Samples = "ready", f.prof.p.Samples
	}
	return fi
}

func (s *Server) apiFiles(w http.ResponseWriter, r *http.Request) {
	out := []fileInfo{}
	for _, f := range s.snapshot() {
		out = append(out, f.info())
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": out})
}

func (s *Server) apiUpload(w http.ResponseWriter, r *http.Request) {
	f, err := s.upload(r.URL.Query().Get("name"), r.Body)
	if err != nil {
		fail(w, http.StatusBadRequest, "%s", err)
		return
	}
	go s.load(f)
	writeJSON(w, http.StatusOK, f.info())
}

// openFile returns the loaded file the f parameter names, or answers the
// request with why not.
func (s *Server) openFile(w http.ResponseWriter, r *http.Request, kind string) *file {
	return s.openFileParam(w, r, "f", kind)
}

// openFileParam is openFile for the file the parameter param names.
func (s *Server) openFileParam(w http.ResponseWriter, r *http.Request, param, kind string) *file {
	id, err := strconv.Atoi(r.URL.Query().Get(param))
	f := s.get(id)
	if err != nil || f == nil {
		fail(w, http.StatusNotFound, "no file %q", r.URL.Query().Get(param))
		return nil
	}
	s.load(f)
	if f.err != nil {
		fail(w, http.StatusUnprocessableEntity, "%s", oneLine(f.err.Error()))
		return nil
	}
	if f.kind != kind {
		fail(w, http.StatusBadRequest, "%s is a %s, not a %s", f.Name, f.kind, kind)
		return nil
	}
	return f
}

// query reads a request's parameters.
type query struct {
	r   *http.Request
	err error
	// before is the recording a profile view compares its own with (the
	// before parameter), nil for none.
	before *file
}

func (q *query) str(name, def string) string {
	if v := q.r.URL.Query().Get(name); v != "" {
		return v
	}
	return def
}

func (q *query) num(name string, def, lo, hi int) int {
	v := q.r.URL.Query().Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		if q.err == nil {
			q.err = fmt.Errorf("%s=%q: want a number from %d to %d", name, v, lo, hi)
		}
		return def
	}
	return n
}

func (q *query) oneOf(name, def string, allowed ...string) string {
	v := q.str(name, def)
	if !slices.Contains(allowed, v) {
		if q.err == nil {
			q.err = fmt.Errorf("%s=%q: want one of %s", name, v, strings.Join(allowed, ", "))
		}
		return def
	}
	return v
}

func (s *Server) heapHandler(h func(f *file, q *query) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := s.openFile(w, r, "heap")
		if f == nil {
			return
		}
		answer(w, r, f, h)
	}
}

// profileHandler answers a view of the recording f; with a parameter
// before, it opens that recording too, for the view to compare f with
// (query.before).
func (s *Server) profileHandler(h func(f *file, q *query) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := s.openFile(w, r, "profile")
		if f == nil {
			return
		}
		var before *file
		if r.URL.Query().Get("before") != "" {
			if before = s.openFileParam(w, r, "before", "profile"); before == nil {
				return
			}
		}
		answer(w, r, f, func(f *file, q *query) (any, error) {
			q.before = before
			return h(f, q)
		})
	}
}

func answer(w http.ResponseWriter, r *http.Request, f *file, h func(f *file, q *query) (any, error)) {
	q := &query{r: r}
	v, err := h(f, q)
	if err == nil {
		err = q.err
	}
	if err != nil {
		fail(w, http.StatusBadRequest, "%s", err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// page of rows: the offset, the total and the rows from offset on.
type page[T any] struct {
	Offset int `json:"offset"`
	Total  int `json:"total"`
	Rows   []T `json:"rows"`
}

func paged[T, U any](all []T, offset, limit int, conv func(T) U) page[U] {
	p := page[U]{Offset: offset, Total: len(all), Rows: []U{}}
	if offset < len(all) {
		for _, x := range all[offset:min(len(all), offset+limit)] {
			p.Rows = append(p.Rows, conv(x))
		}
	}
	return p
}

// heapObject is an object as the heap views show it.
type heapObject struct {
	wire.HeapObject
	Retained      uint64 `json:"retained"`
	RetainedCount uint64 `json:"retained_count"`
	// Reachable is false for an object no root reaches.
	Reachable bool `json:"reachable"`
}

func (ix *heapIndex) object(i int) heapObject {
	_, ok := ix.d.Idom(i)
	return heapObject{HeapObject: wire.NewHeapObject(ix.g, ix.g.Hop(i)), Retained: ix.d.Retained[i],
		RetainedCount: uint64(ix.d.RetainedCount[i]), Reachable: ok}
}

// dumpSummary heads every heap view.
type dumpSummary struct {
	File           string `json:"file"`
	Objects        int    `json:"objects"`
	Bytes          uint64 `json:"bytes"`
	Reachable      int    `json:"reachable"`
	ReachableBytes uint64 `json:"reachable_bytes"`
	Roots          int    `json:"roots"`
}

func (f *file) summary() dumpSummary {
	ix := f.heap
	return dumpSummary{File: f.Name, Objects: ix.g.Len(), Bytes: ix.g.Bytes, Reachable: ix.d.Reachable,
		ReachableBytes: ix.d.ReachableBytes, Roots: len(ix.g.Roots)}
}

type overviewRow struct {
	ID int `json:"id"`
	groupRow
}

// apiOverview: the objects by class (and type) or by type, with count,
// shallow and retained bytes; sort=retained|shallow|count|name.
func apiOverview(f *file, q *query) (any, error) {
	by := q.oneOf("by", "class", pivots...)
	sortBy := q.oneOf("sort", "retained", "retained", "shallow", "count", "name")
	offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 100, 1, maxLimit)
	gs, err := f.heap.pivot(f.Name, by)
	if err != nil {
		return nil, err
	}
	rows := make([]overviewRow, len(gs.rows))
	for k, r := range gs.rows {
		rows[k] = overviewRow{ID: k, groupRow: r}
	}
	slices.SortStableFunc(rows, func(a, b overviewRow) int {
		switch sortBy {
		case "shallow":
			return cmp.Or(cmp.Compare(b.Shallow, a.Shallow), cmp.Compare(a.ID, b.ID))
		case "count":
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.ID, b.ID))
		case "name":
			return cmp.Or(compareGen(a.Generation, b.Generation), cmp.Compare(a.Gem, b.Gem), cmp.Compare(a.Site, b.Site), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Type, b.Type), cmp.Compare(a.ID, b.ID))
		}
		return cmp.Or(cmp.Compare(b.Retained, a.Retained), cmp.Compare(b.Shallow, a.Shallow), cmp.Compare(a.ID, b.ID))
	})
	return struct {
		dumpSummary
		By       string            `json:"by"`
		Sort     string            `json:"sort"`
		HasSites bool              `json:"has_sites"`
		Page     page[overviewRow] `json:"page"`
	}{f.summary(), by, sortBy, f.heap.bySite != nil, paged(rows, offset, limit, func(r overviewRow) overviewRow { return r })}, nil
}

// compareGen orders generations: none (before tracing began) first.
func compareGen(a, b *uint64) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return cmp.Compare(*a, *b)
}

// pivots are the overview's groupings: by class (and type), by type, by
// allocation site (and class and type), by gem and by GC generation.
var pivots = []string{"class", "type", "site", "gem", "generation"}

// pivot returns the groups of pivot by of the dump named name, or why
// there are none.
func (ix *heapIndex) pivot(name, by string) (*groups, error) {
	switch by {
	case "type":
		return ix.byType, nil
	case "site", "gem", "generation":
		if ix.bySite == nil {
			return nil, fmt.Errorf("%s has no allocation sites (file/line): dump after ObjectSpace.trace_object_allocations_start to group by %s", name, by)
		}
		switch by {
		case "site":
			return ix.bySite, nil
		case "gem":
			return ix.byGem, nil
		}
		return ix.byGen, nil
	}
	return ix.byClass, nil
}

// apiObjects: the objects of one overview row, largest retained first.
func apiObjects(f *file, q *query) (any, error) {
	by := q.oneOf("by", "class", pivots...)
	gs, err := f.heap.pivot(f.Name, by)
	if err != nil {
		return nil, err
	}
	id := q.num("group", 0, 0, len(gs.rows)-1)
	offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 100, 1, maxLimit)
	if q.err != nil {
		return nil, q.err
	}
	ix := f.heap
	return struct {
		dumpSummary
		By    string           `json:"by"`
		Group overviewRow      `json:"group"`
		Page  page[heapObject] `json:"page"`
	}{f.summary(), by, overviewRow{ID: id, groupRow: gs.rows[id]},
		paged(ix.membersByRetained(gs, id), offset, limit, func(o uint32) heapObject { return ix.object(int(o)) })}, nil
}

func (ix *heapIndex) lookup(q *query) (int, error) { return ix.lookupAddr(q.str("addr", "")) }

// lookupAddr finds the object at the address s ("0x7f..."), or says why
// there is none.
func (ix *heapIndex) lookupAddr(s string) (int, error) {
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	a, err := strconv.ParseUint(h, 16, 64)
	if err != nil || h == "" {
		return 0, fmt.Errorf("addr=%q: want a hexadecimal address, like 0x7f3fa78f2058", s)
	}
	i, ok := ix.g.Lookup(a)
	if !ok {
		return 0, fmt.Errorf("%#x is not in the dump: no object at that address when it was taken", a)
	}
	return i, nil
}

// apiObject: one object, its references, referrers and the objects it
// immediately dominates (each paged: ro, rr, rd), the root sets that hold
// it, its immediate dominator and allocation site.
func apiObject(f *file, q *query) (any, error) {
	ix := f.heap
	i, err := ix.lookup(q)
	if err != nil {
		return nil, err
	}
	limit := q.num("limit", 50, 1, maxLimit)
	conv := func(o uint32) heapObject { return ix.object(int(o)) }
	dominated := slices.Clone(ix.kids.Of(i))
	slices.SortStableFunc(dominated, func(a, b uint32) int { return cmp.Compare(ix.d.Retained[b], ix.d.Retained[a]) })
	out := struct {
		dumpSummary
		Object     heapObject       `json:"object"`
		Site       string           `json:"site,omitempty"`
		Roots      []string         `json:"roots"`
		Dominator  *heapObject      `json:"dominator"`
		DomByRoot  bool             `json:"dominated_by_roots"`
		References page[heapObject] `json:"references"`
		Referrers  page[heapObject] `json:"referrers"`
		Dominated  page[heapObject] `json:"dominated"`
		// Ivars are the object's instance variables by name (dumps of
		// rbscope's own; absent from dump_all's); IvarsError says why
		// they could not be read.
		Ivars      []ivarField `json:"instance_variables,omitempty"`
		IvarsError string      `json:"instance_variables_error,omitempty"`
	}{
		dumpSummary: f.summary(),
		Object:      ix.object(i),
		Roots:       append([]string{}, ix.rootsOf[uint32(i)]...),
		References:  paged(ix.g.Refs(i), q.num("ro", 0, 0, 1<<31-1), limit, conv),
		Referrers:   paged(ix.rev.Of(i), q.num("rr", 0, 0, 1<<31-1), limit, conv),
		Dominated:   paged(dominated, q.num("rd", 0, 0, 1<<31-1), limit, conv),
	}
	if s, ok := ix.g.Site(i); ok {
		out.Site = s.String()
	}
	out.Ivars, err = ix.ivars(f.Path, i)
	if err != nil {
		out.IvarsError = err.Error()
	}
	if d, ok := ix.d.Idom(i); ok && d >= 0 {
		o := ix.object(d)
		out.Dominator = &o
	} else if ok {
		out.DomByRoot = true
	}
	return out, nil
}

// ivarField is one instance variable of the object page: its name and
// the object it holds (Object; Address alone when the dump has no such
// object) or an immediate as Ruby inspects it (Value).
type ivarField struct {
	Name    string      `json:"name"`
	Object  *heapObject `json:"object,omitempty"`
	Address string      `json:"address,omitempty"`
	Value   string      `json:"value,omitempty"`
}

// ivars reads object i's instance variables from its line in the dump at
// path (the index keeps none: read when an object page asks).
func (ix *heapIndex) ivars(path string, i int) ([]ivarField, error) {
	f, err := heap.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the instance variables: %w", err)
	}
	defer f.Close()
	rec, err := ix.g.Record(f, i)
	if err != nil {
		return nil, fmt.Errorf("reading the instance variables: %w", err)
	}
	var out []ivarField
	for _, iv := range rec.InstanceVariables {
		fl := ivarField{Name: iv.Name, Value: iv.Value}
		if iv.Address != 0 {
			if j, ok := ix.g.Lookup(iv.Address); ok {
				o := ix.object(j)
				fl.Object = &o
			} else {
				fl.Address = fmt.Sprintf("%#x", iv.Address)
			}
		}
		out = append(out, fl)
	}
	return out, nil
}

// pathHop is one hop of a path to the roots; Dominator marks the hops
// every path to the object passes through (its dominators).
type pathHop struct {
	wire.HeapObject
	Dominator bool `json:"dominator,omitempty"`
}

// apiPaths: the n shortest paths from the roots to an object (heap path's
// answer), its dominators marked.
func apiPaths(f *file, q *query) (any, error) {
	ix := f.heap
	i, err := ix.lookup(q)
	if err != nil {
		return nil, err
	}
	n := q.num("n", 5, 1, 100)
	var ignore []int
	var ignored []string
	for _, a := range strings.Split(q.str("ignore", ""), ",") {
		if a == "" {
			continue
		}
		j, err := ix.lookupAddr(a)
		if err != nil {
			return nil, fmt.Errorf("ignore: %w", err)
		}
		ignore, ignored = append(ignore, j), append(ignored, wire.NewHeapObject(ix.g, ix.g.Hop(j)).Address)
	}
	if len(ignore) > 50 {
		return nil, fmt.Errorf("ignore: %d objects, at most 50", len(ignore))
	}
	doms := map[int]bool{}
	for d, ok := ix.d.Idom(i); ok && d >= 0; d, ok = ix.d.Idom(d) {
		doms[d] = true
	}
	type rootPath struct {
		Root string    `json:"root"`
		Hops []pathHop `json:"hops"`
	}
	out := struct {
		dumpSummary
		Object  heapObject `json:"object"`
		Holders int        `json:"holders"`
		Ignored []string   `json:"ignored"`
		Paths   []rootPath `json:"paths"`
	}{dumpSummary: f.summary(), Object: ix.object(i), Holders: len(ix.rev.Of(i)), Ignored: append([]string{}, ignored...), Paths: []rootPath{}}
	holders := slices.Compact(slices.Sorted(slices.Values(ix.rev.Of(i))))
	for _, p := range ix.paths.Paths(i, n, toInts(holders), ignore) {
		rp := rootPath{Root: p.Root}
		for _, h := range p.Hops {
			rp.Hops = append(rp.Hops, pathHop{HeapObject: wire.NewHeapObject(ix.g, h), Dominator: doms[h.Index]})
		}
		out.Paths = append(out.Paths, rp)
	}
	return out, nil
}

// apiTop: heap top's answer (the same document as heap top --json).
func apiTop(f *file, q *query) (any, error) {
	n := q.num("n", 20, 1, maxLimit)
	return wire.NewHeapTop(f.Path, f.heap.g, f.heap.d, f.heap.d.Top(n)), nil
}

// openPair returns the files of a kind a comparison names, the later as f
// and the earlier as before, or answers the request with why not (and
// nil).
func (s *Server) openPair(w http.ResponseWriter, r *http.Request, kind string) (before, after *file) {
	after = s.openFile(w, r, kind)
	if after == nil {
		return nil, nil
	}
	before = s.openFileParam(w, r, "before", kind)
	if before == nil {
		return nil, nil
	}
	return before, after
}

// openDumps returns the heap dumps a comparison names: before, the later
// f, and a third, later still (nil when it names none); or answers the
// request with why not (and a nil after).
func (s *Server) openDumps(w http.ResponseWriter, r *http.Request) (before, after, later *file) {
	before, after = s.openPair(w, r, "heap")
	if after == nil || r.URL.Query().Get("later") == "" {
		return before, after, nil
	}
	if later = s.openFileParam(w, r, "later", "heap"); later == nil {
		return nil, nil, nil
	}
	return before, after, later
}

// heapDiff answers what heap diff --json does: the objects of the dump f
// that the dump before lacks, grouped by class or by allocation site
// (by), the largest top groups (0: all); with a dump later (heap diff A B
// C), those of them that later still holds.
func (s *Server) heapDiff(w http.ResponseWriter, r *http.Request) {
	before, after, later := s.openDumps(w, r)
	if after == nil {
		return
	}
	answer(w, r, after, func(f *file, q *query) (any, error) {
		by := q.oneOf("by", "class", "class", "site")
		top := q.num("top", 30, 0, maxLimit)
		if q.err != nil {
			return nil, q.err
		}
		last := f
		if later != nil {
			last = later
		}
		if by == "site" && !last.heap.g.HasSites() {
			return nil, fmt.Errorf("%s has no allocation sites (file/line): dump after ObjectSpace.trace_object_allocations_start, or group by class", last.Name)
		}
		if later != nil {
			d := heap.Diff3(before.heap.g, f.heap.g, later.heap.g)
			rows, more := d.Rows(by, top)
			return wire.NewHeapDiff3(wire.NewDumpInfo(before.Name, before.heap.g), wire.NewDumpInfo(f.Name, f.heap.g), wire.NewDumpInfo(later.Name, later.heap.g), d, by, rows, more), nil
		}
		d := s.pairs.of(before, f, false).diff
		rows, more := d.Rows(by, top)
		return wire.NewHeapDiff(wire.NewDumpInfo(before.Name, before.heap.g), wire.NewDumpInfo(f.Name, f.heap.g), d, by, rows, more), nil
	})
}

// heapSuspects answers what heap suspects --json does: where the dump f
// grew against the dump before, by the object that keeps the new
// objects, the largest top.
func (s *Server) heapSuspects(w http.ResponseWriter, r *http.Request) {
	before, after, later := s.openDumps(w, r)
	if after == nil {
		return
	}
	answer(w, r, after, func(f *file, q *query) (any, error) {
		top := q.num("top", 10, 1, maxSuspects)
		if q.err != nil {
			return nil, q.err
		}
		a, b := before.heap.g, f.heap.g
		if later != nil {
			c := later.heap.g
			return wire.NewHeapSuspects3(wire.NewDumpInfo(before.Name, a), wire.NewDumpInfo(f.Name, b), wire.NewDumpInfo(later.Name, c), c,
				heap.Diff3(a, b, c), heap.Suspects3(a, b, c, later.heap.d, top)), nil
		}
		pr := s.pairs.of(before, f, true)
		return wire.NewHeapSuspects(wire.NewDumpInfo(before.Name, a), wire.NewDumpInfo(f.Name, b), b, pr.diff, pr.suspects[:min(top, len(pr.suspects))]), nil
	})
}

// dupString is a row of the Waste view's duplicate Strings.
type dupString struct {
	Value   string     `json:"value"`
	Cut     bool       `json:"cut,omitempty"`
	Count   uint64     `json:"count"`
	Bytes   uint64     `json:"bytes"`
	Wasted  uint64     `json:"wasted"`
	Example heapObject `json:"example"`
}

// oversized is a row of the Waste view's oversized collections.
type oversized struct {
	Object heapObject `json:"object"`
	Length uint64     `json:"length"`
	Bytes  uint64     `json:"bytes"`
	Spare  uint64     `json:"spare"`
}

// apiWaste: memory a dump spends for nothing: the values held by several
// Strings each (the n that waste the most), the empty Arrays and Hashes
// by class and by allocation site, and the oversized ones (the n with the
// most spare bytes, and all by class and by site).
func apiWaste(f *file, q *query) (any, error) {
	n := q.num("n", 50, 1, maxLimit)
	if q.err != nil {
		return nil, q.err
	}
	ix := f.heap
	w := ix.waste()
	dups := w.dups[:min(n, len(w.dups))]
	rows := make([]dupString, len(dups))
	for k, d := range dups {
		rows[k] = dupString{Value: d.Value, Cut: d.Cut, Count: d.Count, Bytes: d.Bytes, Wasted: d.Wasted, Example: ix.object(d.Example)}
	}
	over := w.oversized[:min(n, len(w.oversized))]
	overRows := make([]oversized, len(over))
	for k, o := range over {
		overRows[k] = oversized{Object: ix.object(o.Object), Length: o.Length, Bytes: o.Bytes, Spare: o.Spare}
	}
	return struct {
		dumpSummary
		Strings        []dupString    `json:"strings"`
		StringsWasted  uint64         `json:"strings_wasted"`
		Empty          []wire.DiffRow `json:"empty"`
		EmptySites     []wire.DiffRow `json:"empty_sites,omitempty"`
		Oversized      []oversized    `json:"oversized"`
		OversizedSpare uint64         `json:"oversized_spare"`
		OverClasses    []wire.DiffRow `json:"oversized_classes"`
		OverSites      []wire.DiffRow `json:"oversized_sites,omitempty"`
	}{f.summary(), rows, w.wasted, wire.NewDiffRows(w.emptyByClass), wire.NewDiffRows(w.emptyBySite),
		overRows, w.spare, wire.NewDiffRows(w.overByClass), wire.NewDiffRows(w.overBySite)}, nil
}

func (s *Server) flameSVG(w http.ResponseWriter, r *http.Request) {
	f := s.openFile(w, r, "profile")
	if f == nil {
		return
	}
	var b bytes.Buffer
	pv, err := f.view(&query{r: r})
	if err != nil {
		fail(w, http.StatusBadRequest, "%s", err)
		return
	}
	o := output.Options{Lines: r.URL.Query().Get("lines") != "0", Title: pv.title, Icicle: r.URL.Query().Get("icicle") == "1"}
	// A differential flame graph against another recording.
	var ok bool
	if o.Baseline, ok = s.baselineParam(w, r); !ok {
		return
	}
	if err := output.Flamegraph(&b, pv.p, o); err != nil {
		fail(w, http.StatusInternalServerError, "%s", err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Content-Security-Policy", svgCSP)
	w.Write(b.Bytes())
}

// baselineParam returns the recording an SVG view compares its own with
// (the before parameter), seen through the same transforms, nil for
// none; false when it answered the request with why not.
func (s *Server) baselineParam(w http.ResponseWriter, r *http.Request) (*profile.Profile, bool) {
	if r.URL.Query().Get("before") == "" {
		return nil, true
	}
	before := s.openFileParam(w, r, "before", "profile")
	if before == nil {
		return nil, false
	}
	bv, err := before.view(&query{r: r})
	if err != nil {
		fail(w, http.StatusBadRequest, "%s: %s", before.Name, err)
		return nil, false
	}
	return bv.p, true
}

// stackChartSVG draws the recording's stack chart through its transforms,
// over the time they keep (all of it without a time window).
func (s *Server) stackChartSVG(w http.ResponseWriter, r *http.Request) {
	f := s.openFile(w, r, "profile")
	if f == nil {
		return
	}
	q := &query{r: r}
	pv, err := f.view(q)
	if err != nil {
		fail(w, http.StatusBadRequest, "%s", err)
		return
	}
	ts, _ := profile.ParseTransforms(q.str("t", "")) // view has read them
	o := output.Options{Lines: r.URL.Query().Get("lines") == "1", Title: pv.title}
	o.From, o.To = profile.Window(ts)
	// Against another recording, each box on the change of its
	// function's share.
	var ok bool
	if o.Baseline, ok = s.baselineParam(w, r); !ok {
		return
	}
	var b bytes.Buffer
	if err := output.StackChart(&b, pv.p, o); err != nil {
		fail(w, http.StatusBadRequest, "%s", err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Content-Security-Policy", svgCSP)
	w.Write(b.Bytes())
}

// crashStore returns the crash store's directory, or answers with why
// there is none.
func (s *Server) crashStore(w http.ResponseWriter) string {
	if s.opts.CrashDir == "" {
		msg := "no crash store (rbscope crash install keeps one)"
		if s.opts.CrashErr != nil {
			msg = "no crash store: " + oneLine(s.opts.CrashErr.Error())
		}
		fail(w, http.StatusNotFound, "%s", msg)
	}
	return s.opts.CrashDir
}

// apiCrashes: crash list's document.
func (s *Server) apiCrashes(w http.ResponseWriter, r *http.Request) {
	dir := s.crashStore(w)
	if dir == "" {
		return
	}
	entries, err := crash.ListReports(dir)
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "crash store %s: %s", dir, unwrapPath(err))
		return
	}
	writeJSON(w, http.StatusOK, wire.NewCrashList(entries))
}

// apiCrash: one report, as crash show --json prints it and as its text.
func (s *Server) apiCrash(w http.ResponseWriter, r *http.Request) {
	dir := s.crashStore(w)
	if dir == "" {
		return
	}
	rep, err := crash.Load(dir, r.URL.Query().Get("id"))
	if err != nil {
		fail(w, http.StatusNotFound, "%s", oneLine(err.Error()))
		return
	}
	var text bytes.Buffer
	crash.WriteText(&text, rep)
	writeJSON(w, http.StatusOK, struct {
		Report *wire.CrashReport `json:"report"`
		Text   string            `json:"text"`
	}{wire.NewCrashReport(rep), text.String()})
}

// domRow is a child of a node of the dominator tree as the page shows it:
// an object (with how many it dominates in turn), or with by=class a
// group of the children.
type domRow struct {
	heapObject
	Children int `json:"children"`
}

// domGroup is the children of a node of one class and type.
type domGroup struct {
	Class    string `json:"class"`
	Type     string `json:"type"`
	Count    int    `json:"count"`
	Shallow  uint64 `json:"shallow"`
	Retained uint64 `json:"retained"`
}

// apiDomTree: one node of the dominator tree (addr; none: the roots) and
// the objects it immediately dominates, largest retained first, one level
// a request; by=class groups them by class and type (class and type pick
// one group's objects).
func apiDomTree(f *file, q *query) (any, error) {
	ix := f.heap
	node := -1
	if q.str("addr", "") != "" {
		i, err := ix.lookup(q)
		if err != nil {
			return nil, err
		}
		if _, ok := ix.d.Idom(i); !ok {
			return nil, fmt.Errorf("%#x: no root reaches it, so it is in no dominator tree", ix.g.Address(i))
		}
		node = i
	}
	by := q.oneOf("by", "object", "object", "class")
	offset, limit := q.num("offset", 0, 0, 1<<31-1), q.num("limit", 100, 1, maxLimit)
	if q.err != nil {
		return nil, q.err
	}
	kids := slices.Clone(ix.kids.Of(node))
	if c, t := q.r.URL.Query().Get("class"), q.r.URL.Query().Get("type"); c != "" || t != "" {
		kids = slices.DeleteFunc(kids, func(k uint32) bool { return ix.g.ClassName(int(k)) != c || ix.g.Type(int(k)) != t })
	}
	slices.SortStableFunc(kids, func(a, b uint32) int { return cmp.Compare(ix.d.Retained[b], ix.d.Retained[a]) })
	out := struct {
		dumpSummary
		Node      *heapObject     `json:"node"` // null: the roots
		Ancestors []heapObject    `json:"ancestors"`
		By        string          `json:"by"`
		Objects   *page[domRow]   `json:"objects,omitempty"`
		Groups    *page[domGroup] `json:"groups,omitempty"`
	}{dumpSummary: f.summary(), Ancestors: []heapObject{}, By: by}
	if node >= 0 {
		o := ix.object(node)
		out.Node = &o
		for a, ok := ix.d.Idom(node); ok && a >= 0; a, ok = ix.d.Idom(a) {
			out.Ancestors = append([]heapObject{ix.object(a)}, out.Ancestors...)
		}
	}
	if by == "object" {
		p := paged(kids, offset, limit, func(k uint32) domRow { return domRow{ix.object(int(k)), len(ix.kids.Of(int(k)))} })
		out.Objects = &p
		return out, nil
	}
	type key struct{ class, typ string }
	idx := map[key]int{}
	var groups []domGroup
	for _, k := range kids {
		kk := key{ix.g.ClassName(int(k)), ix.g.Type(int(k))}
		g, ok := idx[kk]
		if !ok {
			g = len(groups)
			idx[kk] = g
			groups = append(groups, domGroup{Class: kk.class, Type: kk.typ})
		}
		groups[g].Count++
		groups[g].Shallow += ix.g.Memsize(int(k))
		groups[g].Retained += ix.d.Retained[k]
	}
	slices.SortStableFunc(groups, func(a, b domGroup) int { return cmp.Compare(b.Retained, a.Retained) })
	p := paged(groups, offset, limit, func(g domGroup) domGroup { return g })
	out.Groups = &p
	return out, nil
}

// maxMerged is how many objects of a group the merged paths follow (the
// largest retained first), and maxMergedNodes how many nodes of their
// tree an answer holds.
const (
	maxMerged      = 10_000
	maxMergedNodes = 300
)

// mergedNode is a node of the merged paths' tree as the page shows it.
type mergedNode struct {
	Root     string        `json:"root,omitempty"`
	Object   *heapObject   `json:"object,omitempty"`
	Targets  int           `json:"targets"`
	Children []*mergedNode `json:"children"`
}

// apiMerged: the shortest paths from the roots to the objects of one
// overview row (by, group), merged into a tree: which objects hold many of
// them at once, with how many each. Branches that hold fewer than 1 in 200
// of them are left out, and the tree is cut at maxMergedNodes nodes.
func apiMerged(f *file, q *query) (any, error) {
	by := q.oneOf("by", "class", pivots...)
	gs, err := f.heap.pivot(f.Name, by)
	if err != nil {
		return nil, err
	}
	id := q.num("group", 0, 0, len(gs.rows)-1)
	if q.err != nil {
		return nil, q.err
	}
	ix := f.heap
	members := ix.membersByRetained(gs, id)
	targets := make([]int, 0, min(len(members), maxMerged))
	for _, m := range members[:min(len(members), maxMerged)] {
		targets = append(targets, int(m))
	}
	roots, unreached := ix.paths.MergedPaths(targets)
	floor := max(1, len(targets)/200)
	budget := maxMergedNodes
	var conv func(n *heap.MergedNode) *mergedNode
	conv = func(n *heap.MergedNode) *mergedNode {
		budget--
		out := &mergedNode{Root: n.Root, Targets: n.Targets, Children: []*mergedNode{}}
		if n.Hop != nil {
			o := ix.object(n.Hop.Index)
			out.Object = &o
		}
		for _, c := range n.Children {
			if c.Targets < floor || budget <= 0 {
				break // sorted: the rest are smaller
			}
			out.Children = append(out.Children, conv(c))
		}
		return out
	}
	tree := []*mergedNode{}
	for _, r := range roots {
		if r.Targets >= floor && budget > 0 {
			tree = append(tree, conv(r))
		}
	}
	return struct {
		dumpSummary
		Group     overviewRow   `json:"group"`
		Followed  int           `json:"followed"`
		Unreached int           `json:"unreached"`
		Tree      []*mergedNode `json:"tree"`
	}{f.summary(), overviewRow{ID: id, groupRow: gs.rows[id]}, len(targets), unreached, tree}, nil
}

// toInts converts object numbers.
func toInts(s []uint32) []int {
	out := make([]int, len(s))
	for k, v := range s {
		out[k] = int(v)
	}
	return out
}
