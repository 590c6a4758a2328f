package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
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

			if k > 0 {
				return // the page once
			}
			s := startUI(t, before, after, own[0], own[1])
			s.waitLoaded(t)
			var ui wire.HeapSuspects
			s.get(t, "/api/heap/suspects?f=1&before=0&top=5", &ui)
			if !reflect.DeepEqual(ui, live) {
				t.Errorf("the page's suspects differ from heap suspects --json:\nui  %+v\ncli %+v", ui, live)
			}
			ctx, problems := browser(t)
			visit(t, ctx, s, "#/heap/3/suspects?before=2", "heap-suspects")
			heads := eval[[]string](t, ctx, `[...document.querySelectorAll(".suspect h2")].map(h => h.innerText)`)
			sites := eval[[]string](t, ctx, `[...document.querySelectorAll(".suspect table")].map(t => t.innerText)`)
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
