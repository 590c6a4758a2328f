package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/ui"
	"github.com/rbscope/rbscope/internal/wire"
)

// leakReport is what testdata/leak_hunt.rb says of itself.
type leakReport struct {
	Seq       int    `json:"seq"`
	Served    int    `json:"served"`
	Store     string `json:"store"`
	Callbacks string `json:"callbacks"`
	CacheSite string `json:"cache_site"`
	ProcSite  string `json:"proc_site"`
}

// waitLeakReport waits for the leak program's report of round seq.
func waitLeakReport(t *testing.T, p *testruby.Process, seq int) leakReport {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var rep leakReport
		if b, err := os.ReadFile(p.Report); err == nil && json.Unmarshal(b, &rep) == nil && rep.Seq >= seq {
			return rep
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report of round %d from the leak program; output:\n%s", seq, p.Output())
		}
	}
}

// TestLeakHunt is a leak hunt as a Rails developer has it: a program that
// leaks through a class-level cache (a Hash in a module constant, keyed by
// request id) and a callback list that keeps Procs. Two live dumps by
// rbscope some requests apart: heap suspects names both holders, first,
// with their paths from the roots through the module and the class, and
// the objects each keeps, as many as the program served; the page's Leak
// suspects view gives the same document, and shows it in Chromium. On the
// program's own dump_all dumps (allocation tracing on), each suspect's
// allocation site is where Ruby says the program allocated what leaked.
func TestLeakHunt(t *testing.T) {
	const requests = 1500
	for k, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			dir := t.TempDir()
			p := testruby.Start(t, rb, "leak_hunt.rb", nil, fmt.Sprint(requests), dir)
			rep := waitLeakReport(t, p, 0)
			before, after := filepath.Join(dir, "live-before.json"), filepath.Join(dir, "live-after.json")
			if _, stderr, code := rbscope(t, "heap", "dump", "-p", fmt.Sprint(p.PID()), "-o", before); code != 0 {
				t.Fatalf("heap dump: %s", stderr)
			}
			p.Cmd.Process.Signal(syscall.SIGUSR1)
			rep = waitLeakReport(t, p, 1)
			if _, stderr, code := rbscope(t, "heap", "dump", "-p", fmt.Sprint(p.PID()), "-o", after); code != 0 {
				t.Fatalf("heap dump: %s", stderr)
			}

			stdout, stderr, code := rbscope(t, "heap", "suspects", before, after, "--json", "--top", "5")
			if code != 0 {
				t.Fatalf("heap suspects: %s", stderr)
			}
			var live wire.HeapSuspects
			if err := json.Unmarshal([]byte(stdout), &live); err != nil {
				t.Fatal(err)
			}
			checkSuspects(t, "live dumps", live, rep, requests, false)
			text, _, _ := rbscope(t, "heap", "suspects", before, after, "--top", "2")
			for _, want := range []string{"MODULE Module ReportCache -> HASH Hash size", "CLASS Class Hooks -> ARRAY Array length"} {
				if !strings.Contains(text, want) {
					t.Errorf("heap suspects' text lacks the path %q:\n%s", want, text)
				}
			}

			own := []string{filepath.Join(dir, "before.json"), filepath.Join(dir, "after.json")}
			stdout, stderr, code = rbscope(t, "heap", "suspects", own[0], own[1], "--json", "--top", "5")
			if code != 0 {
				t.Fatalf("heap suspects: %s", stderr)
			}
			var traced wire.HeapSuspects
			if err := json.Unmarshal([]byte(stdout), &traced); err != nil {
				t.Fatal(err)
			}
			checkSuspects(t, "dump_all's dumps", traced, rep, requests, true)

			// Three dumps, a round of requests apart: what the first round
			// allocated and the second still holds is its leak, each part
			// at its line (a String, a Proc and its env, a User a request),
			// and little else.
			first := filepath.Join(dir, "first.json")
			if b, err := os.ReadFile(own[0]); err != nil || os.WriteFile(first, b, 0o600) != nil {
				t.Fatal(err)
			}
			p.Cmd.Process.Signal(syscall.SIGUSR1)
			waitLeakReport(t, p, 2)
			stdout, stderr, code = rbscope(t, "heap", "diff", first, filepath.Join(dir, "after-1.json"), filepath.Join(dir, "after-2.json"), "--by", "site", "--json", "--top", "0")
			if code != 0 {
				t.Fatalf("heap diff of three dumps: %s", stderr)
			}
			var three wire.HeapDiff
			if err := json.Unmarshal([]byte(stdout), &three); err != nil || three.KeptObjects == nil || three.Later == nil {
				t.Fatalf("heap diff of three dumps: %v\n%s", err, stdout)
			}
			kept := map[string]uint64{}
			for _, r := range three.Rows {
				kept[r.Class+" "+r.Site] += r.Count
			}
			if kept["String "+rep.CacheSite] != requests || kept["Proc "+rep.ProcSite] != requests || kept["User "+userSite(rep)] != requests ||
				*three.KeptObjects > 4*requests+50 || three.NewObjects < *three.KeptObjects {
				t.Errorf("three dumps: kept %d of %d new objects: %v; the program kept %d Strings at %s, Procs (and their envs) at %s, Users",
					*three.KeptObjects, three.NewObjects, kept, requests, rep.CacheSite, rep.ProcSite)
			}

			stdout, stderr, code = rbscope(t, "heap", "suspects", first, filepath.Join(dir, "after-1.json"), filepath.Join(dir, "after-2.json"), "--json", "--top", "5")
			if code != 0 {
				t.Fatalf("heap suspects of three dumps: %s", stderr)
			}
			var suspects3 wire.HeapSuspects
			if err := json.Unmarshal([]byte(stdout), &suspects3); err != nil || suspects3.Later == nil {
				t.Fatalf("heap suspects of three dumps: %v\n%s", err, stdout)
			}
			checkSuspects(t, "three dumps", suspects3, rep, requests, true)

			if k > 0 {
				return // the page once
			}
			s := startUI(t, before, after, own[0], own[1], first, filepath.Join(dir, "after-1.json"), filepath.Join(dir, "after-2.json"))
			s.waitLoaded(t)
			var ui3 wire.HeapDiff
			s.get(t, "/api/heap/diff?f=5&before=4&later=6&by=site&top=0", &ui3)
			if !reflect.DeepEqual(ui3, three) {
				t.Errorf("the page's diff of three dumps differs from heap diff A B C --json:\nui  %+v\ncli %+v", ui3, three)
			}
			var uiSus3 wire.HeapSuspects
			s.get(t, "/api/heap/suspects?f=5&before=4&later=6&top=5", &uiSus3)
			if !reflect.DeepEqual(uiSus3, suspects3) {
				t.Errorf("the page's suspects of three dumps differ from heap suspects A B C --json:\nui  %+v\ncli %+v", uiSus3, suspects3)
			}
			var ui wire.HeapSuspects
			s.get(t, "/api/heap/suspects?f=1&before=0&top=5", &ui)
			if !reflect.DeepEqual(ui, live) {
				t.Errorf("the page's suspects differ from heap suspects --json:\nui  %+v\ncli %+v", ui, live)
			}
			ctx, problems := browser(t)
			visit(t, ctx, s, "#/heap/5/diff?before=4&later=6", "heap-diff-three")
			if got := eval[string](t, ctx, `document.getElementById("diff-summary").innerText`); !strings.Contains(got, fmt.Sprintf("still holds %s of the new ones", commas(*three.KeptObjects))) {
				t.Errorf("the page's diff of three dumps: %q", got)
			}
			visit(t, ctx, s, "#/heap/3/suspects?before=2", "heap-suspects")
			heads := eval[[]string](t, ctx, `[...document.querySelectorAll(".suspect h2")].map(h => h.innerText)`)
			sites := eval[[]string](t, ctx, `[...document.querySelectorAll(".suspect table")].map(t => t.innerText)`)
			// The other six dumps, each a link to compare with.
			if picks := eval[[]string](t, ctx, `[...document.querySelectorAll("#before-pick a")].map(a => a.innerText)`); len(picks) != 6 {
				t.Errorf("the dumps to compare with: %q", picks)
			}
			if len(heads) < 2 || !strings.Contains(heads[0], rep.Store) || !strings.Contains(heads[1], rep.Callbacks) ||
				len(sites) < 2 || !strings.Contains(sites[0], rep.CacheSite) || !strings.Contains(sites[1], rep.ProcSite) {
				t.Errorf("the Leak suspects view: %q %q; the program's holders %s %s, sites %s %s", heads, sites, rep.Store, rep.Callbacks, rep.CacheSite, rep.ProcSite)
			}
			if pr := problems(); len(pr) > 0 {
				t.Errorf("the page: %v", pr)
			}
		})
	}
}

// userSite is where leak_hunt.rb allocates each request's User: the line
// after the cached String's.
func userSite(rep leakReport) string {
	i := strings.LastIndexByte(rep.CacheSite, ':')
	n, _ := strconv.Atoi(rep.CacheSite[i+1:])
	return fmt.Sprintf("%s:%d", rep.CacheSite[:i], n+1)
}

// checkSuspects holds the first two suspects of doc to the leak program's
// own account: the cache's Hash keeps a String per request, the callback
// list's Array a Proc per request, and with sites, each at the line Ruby
// says.
func checkSuspects(t *testing.T, what string, doc wire.HeapSuspects, rep leakReport, requests int, sites bool) {
	t.Helper()
	if len(doc.Suspects) < 2 || doc.Suspects[0].Holder == nil || doc.Suspects[1].Holder == nil {
		t.Fatalf("%s: suspects %+v, want the cache's Hash and the callbacks' Array first", what, doc.Suspects)
	}
	for k, want := range []struct{ holder, class, site string }{{rep.Store, "String", rep.CacheSite}, {rep.Callbacks, "Proc", rep.ProcSite}} {
		s := doc.Suspects[k]
		var kept uint64
		for _, r := range s.Classes {
			if r.Class == want.class {
				kept = r.Count
			}
		}
		// Without sites, a leaked object that took the slot of an object
		// of its class freed since the first dump (the requests' garbage)
		// looks like that one: some of the leak goes unseen.
		low := uint64(requests)
		if !sites {
			low = uint64(requests) * 9 / 10
		}
		if s.Holder.Address != want.holder || kept < low || kept > uint64(requests) || s.Path == nil || s.Path.Hops[len(s.Path.Hops)-1].Address != want.holder {
			t.Errorf("%s: suspect %d is %+v keeping %d %s (path %+v); the program's holder is %s, %d requests", what, k+1, *s.Holder, kept, want.class, s.Path, want.holder, requests)
		}
		if sites {
			found := false
			for _, r := range s.Sites {
				found = found || r.Class == want.class && r.Site == want.site && r.Count == uint64(requests)
			}
			if !found {
				t.Errorf("%s: suspect %d's sites %+v lack %d %s from %s", what, k+1, s.Sites, requests, want.class, want.site)
			}
		}
	}
}

// post makes a POST to the page with its CSRF token (none when csrf is
// empty) and decodes the answer into v; it returns the status.
func (s *uiServer) post(t *testing.T, path, csrf string, v any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+path+"&token="+s.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, b)
		}
	} else if v != nil {
		json.Unmarshal(b, v)
	}
	return resp.StatusCode
}

// csrfToken reads the page's CSRF token from its HTML.
func (s *uiServer) csrfToken(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`name="csrf-token" content="([0-9a-f]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", b)
	}
	return string(m[1])
}

// TestLeakHuntThroughThePage: the leak hunt from the page alone. The
// Processes view lists the leaking program (its command, Ruby version,
// threads); its stack from the page is stack --json's threads; two heap
// dumps taken from the page, requests apart, open on it, and their Leak
// suspects are the cache's Hash and the callback list's Array first; a
// recording from the page opens as a profile. Actions need the CSRF token
// and a Ruby process the page lists.
func TestLeakHuntThroughThePage(t *testing.T) {
	const requests = 1000
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "leak_hunt.rb", nil, fmt.Sprint(requests))
	rep := waitLeakReport(t, p, 0)
	s := startUI(t)
	csrf := s.csrfToken(t)

	var live struct {
		Processes []ui.LiveProcess `json:"processes"`
	}
	s.get(t, "/api/live?x=1", &live)
	var lp ui.LiveProcess
	for _, q := range live.Processes {
		if q.PID == p.PID() {
			lp = q
		}
	}
	if lp.PID == 0 || !strings.Contains(lp.Command, "leak_hunt.rb") || lp.Threads < 1 || lp.RSS == 0 ||
		lp.Ruby != testruby.Version(rb) {
		t.Errorf("Processes: %+v lacks pid %d of Ruby %s as it is", live.Processes, p.PID(), testruby.Version(rb))
	}

	// Refused: no CSRF token; a process that is not Ruby.
	var e struct{ Error string }
	if code := s.post(t, fmt.Sprintf("/api/live/heap?pid=%d", p.PID()), "", &e); code != http.StatusForbidden {
		t.Errorf("a heap dump without the CSRF token: %d", code)
	}
	if code := s.post(t, fmt.Sprintf("/api/live/stack?pid=%d", os.Getpid()), csrf, &e); code != http.StatusNotFound || !strings.Contains(e.Error, "not a Ruby process this user can read") {
		t.Errorf("a stack of a process that is not Ruby: %d %q", code, e.Error)
	}

	var stack wire.Stack
	if code := s.post(t, fmt.Sprintf("/api/live/stack?pid=%d", p.PID()), csrf, &stack); code != http.StatusOK {
		t.Fatalf("stack from the page: %d", code)
	}
	stdout, _, code := rbscope(t, "stack", "-p", fmt.Sprint(p.PID()), "--json")
	var cli wire.Stack
	if code != 0 || json.Unmarshal([]byte(stdout), &cli) != nil {
		t.Fatalf("stack --json: %s", stdout)
	}
	if len(stack.Threads) == 0 || len(stack.Threads) != len(cli.Threads) || stack.Threads[0].TID != cli.Threads[0].TID || stack.RubyVersion != cli.RubyVersion {
		t.Errorf("the page's stack %+v, stack --json's %+v", stack, cli)
	}

	var first, second, recorded uiFile
	if code := s.post(t, fmt.Sprintf("/api/live/heap?pid=%d", p.PID()), csrf, &first); code != http.StatusOK {
		t.Fatalf("heap dump from the page: %d", code)
	}
	p.Cmd.Process.Signal(syscall.SIGUSR1)
	rep = waitLeakReport(t, p, 1)
	if code := s.post(t, fmt.Sprintf("/api/live/heap?pid=%d", p.PID()), csrf, &second); code != http.StatusOK {
		t.Fatalf("heap dump from the page: %d", code)
	}
	if code := s.post(t, fmt.Sprintf("/api/live/record?pid=%d&seconds=1", p.PID()), csrf, &recorded); code != http.StatusOK {
		t.Fatalf("record from the page: %d", code)
	}
	files := s.waitLoaded(t)
	if len(files) != 3 || files[first.ID].Kind != "heap" || files[second.ID].Kind != "heap" || files[recorded.ID].Kind != "profile" || files[recorded.ID].State != "ready" {
		t.Fatalf("files after the actions: %+v", files)
	}
	var sus wire.HeapSuspects
	s.get(t, fmt.Sprintf("/api/heap/suspects?f=%d&before=%d", second.ID, first.ID), &sus)
	checkSuspects(t, "dumps from the page", sus, rep, requests, false)

	ctx, problems := browser(t)
	visit(t, ctx, s, "#/live", "live")
	if rows := cells(t, ctx, "#processes"); !slices.ContainsFunc(rows, func(r []string) bool { return len(r) > 0 && r[0] == fmt.Sprint(p.PID()) }) {
		t.Errorf("the Processes view lacks pid %d: %q", p.PID(), rows)
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}
