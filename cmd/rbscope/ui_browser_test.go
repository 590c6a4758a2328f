package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rbscope/rbscope/internal/output/rawtest"
	"github.com/rbscope/rbscope/internal/profile"
	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

// ScreenshotsEnv names a directory the browser test copies its
// screenshots to (the README's come from there).
const screenshotsEnv = "RBSCOPE_UI_SCREENSHOTS"

// browser starts Debian's headless Chromium (never a downloaded one) and
// returns a tab's context and what the tab did wrong: JavaScript
// exceptions, console errors (a refused Content-Security-Policy among
// them) and requests to anywhere but the loopback server.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	var bin string
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		testruby.Missing(t, "no chromium to run the page in (apt-get install chromium, or make deps)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Headless,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })

	var mu sync.Mutex
	var problems []string
	note := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			note("JavaScript exception: %s (%s:%d)", msg, d.URL, d.LineNumber)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == "error" || ev.Type == "assert" {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				note("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == "error" {
				note("browser log: %s (%s)", ev.Entry.Text, ev.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			u, err := url.Parse(ev.Request.URL)
			if err != nil || !(u.Scheme == "data" || u.Scheme == "about" || (u.Scheme == "http" && u.Hostname() == "127.0.0.1")) {
				note("request outside loopback: %s", ev.Request.URL)
			}
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// visit opens a view of the page (its fragment) and waits until it has
// rendered (or shown its error), then saves a screenshot named name.
func visit(t *testing.T, ctx context.Context, s *uiServer, frag, name string) {
	t.Helper()
	visitWant(t, ctx, s, frag, name, "ready")
}

func visitWant(t *testing.T, ctx context.Context, s *uiServer, frag, name, want string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+frag)); err != nil {
		t.Fatalf("%s: %v", frag, err)
	}
	check := fmt.Sprintf(`(() => { const v = document.getElementById("view"); return v.dataset.route === %q && (v.dataset.state === "ready" || v.dataset.state === "error"); })()`, frag)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](check, chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s did not render: %v\n%s", frag, err, html)
	}
	if state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("view").dataset.state`)); state != want {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("view").innerText`))
		t.Errorf("%s: %s", frag, text)
	}
	saveScreenshot(t, ctx, name)
}

// saveScreenshot saves what the tab shows as name.png, in the directory
// screenshotsEnv names or else the test's own.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = screenshotDir(t)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

var screenshots struct {
	sync.Mutex
	dir map[*testing.T]string // by test: a name comes again with -count
}

// screenshotDir is one temporary directory per test for its screenshots.
func screenshotDir(t *testing.T) string {
	screenshots.Lock()
	defer screenshots.Unlock()
	if screenshots.dir == nil {
		screenshots.dir = map[*testing.T]string{}
	}
	if d, ok := screenshots.dir[t]; ok {
		return d
	}
	d := t.TempDir()
	screenshots.dir[t] = d
	return d
}

// eval runs JavaScript in the page and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// cells returns the text of a table's cells, row by row.
func cells(t *testing.T, ctx context.Context, table string) [][]string {
	t.Helper()
	return eval[[][]string](t, ctx, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(tr => [...tr.cells].map(c => c.innerText.trim()))`, table+" tbody tr"))
}

// commas formats n as the page does (en-US grouping).
func commas(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestUIBrowser loads every view in Chromium and checks that it shows the
// command line's numbers, throws nothing and asks nothing of the outside.
func TestUIBrowser(t *testing.T) {
	ctx, problems := browser(t)
	dir := t.TempDir()
	dump, rep := heapGraphDump(t, dir)
	raw := testruby.Testdata("golden/demo.raw.gz")
	notDump := filepath.Join(dir, "notes.txt")
	os.WriteFile(notDump, []byte("not a dump\n"), 0o600)
	config, crashID := crashStoreConfig(t)
	s := startUI(t, "--crash-config", config, dump, raw, notDump)
	s.waitLoaded(t)

	stdout, _, code := rbscope(t, "heap", "top", dump, "--top", "50", "--json")
	var top wire.HeapTop
	if code != 0 || json.Unmarshal([]byte(stdout), &top) != nil {
		t.Fatalf("heap top: %s", stdout)
	}
	stdout, _, code = rbscope(t, "heap", "path", dump, rep.Path.Target, "--all", "5", "--json")
	var path wire.HeapPath
	if code != 0 || json.Unmarshal([]byte(stdout), &path) != nil {
		t.Fatalf("heap path: %s", stdout)
	}
	summary, _, code := rbscope(t, "report", "-i", raw, "-f", "summary", "-o", "-")
	if code != 0 {
		t.Fatal("report failed")
	}

	// Files: the bad one says why, once.
	visit(t, ctx, s, "#/", "files")
	rows := cells(t, ctx, "#files")
	if len(rows) != 3 || !strings.Contains(rows[0][1], fmt.Sprintf("%s objects", commas(uint64(top.Objects)))) ||
		!strings.Contains(rows[1][1], "recording, 70 samples") || !strings.Contains(rows[2][1], "notes.txt: not a heap dump") {
		t.Errorf("files: %q", rows)
	}

	// Overview: the summary's figures are heap top's.
	visit(t, ctx, s, "#/heap/0/overview", "heap-overview")
	head := eval[string](t, ctx, `document.querySelector(".summary").innerText`)
	if !strings.Contains(head, commas(uint64(top.Objects))+" objects") || !strings.Contains(head, commas(uint64(top.Reachable))+" objects") {
		t.Errorf("overview heading %q; heap top: %d objects, %d reachable", head, top.Objects, top.Reachable)
	}
	// Every row on one page: the counts add up to heap top's objects.
	rows = cells(t, ctx, "#rows")
	var count uint64
	for _, r := range rows {
		n, _ := strconv.ParseUint(strings.ReplaceAll(r[2], ",", ""), 10, 64)
		count += n
	}
	if len(rows) == 0 || len(rows) >= 100 || count != uint64(top.Objects) {
		t.Errorf("overview: %d rows, %d objects; heap top: %d objects", len(rows), count, top.Objects)
	}
	visit(t, ctx, s, "#/heap/0/overview?by=type&sort=count", "heap-overview-type")

	// Top retainers: heap top's rows.
	visit(t, ctx, s, "#/heap/0/top", "heap-top")
	rows = cells(t, ctx, "#rows")
	if len(rows) != len(top.Retainers) {
		t.Fatalf("top: %d rows, heap top %d", len(rows), len(top.Retainers))
	}
	for k, r := range top.Retainers {
		if rows[k][0] != r.Address || rows[k][5] != commas(r.Retained) || rows[k][6] != commas(r.Count) || rows[k][7] != r.Dominator {
			t.Errorf("top row %d: %q; heap top %+v", k, rows[k], r)
		}
	}

	// Compare: with no other heap dump open, the page says so; against
	// itself, heap diff's figures (nothing new).
	visit(t, ctx, s, "#/heap/0/diff", "heap-diff-pick")
	if got := eval[string](t, ctx, `document.getElementById("before-pick").innerText`); !strings.Contains(got, "no other heap dump is open") {
		t.Errorf("compare with no other dump: %q", got)
	}
	stdout, _, code = rbscope(t, "heap", "diff", dump, dump, "--json")
	var self wire.HeapDiff
	if code != 0 || json.Unmarshal([]byte(stdout), &self) != nil {
		t.Fatalf("heap diff: %s", stdout)
	}
	visit(t, ctx, s, "#/heap/0/diff?before=0", "heap-diff")
	if got, want := eval[string](t, ctx, `document.getElementById("diff-summary").innerText`), fmt.Sprintf(": %s objects (", commas(self.NewObjects)); !strings.Contains(got, want) {
		t.Errorf("diff summary %q, want %q (heap diff --json)", got, want)
	}

	// Object page of the largest retainer.
	r0 := top.Retainers[0]
	visit(t, ctx, s, "#/heap/0/object?addr="+r0.Address, "heap-object")
	if got := eval[string](t, ctx, `document.getElementById("retained").innerText`); got != fmt.Sprintf("%s bytes in %s objects", commas(r0.Retained), commas(r0.Count)) {
		t.Errorf("object %s: retained %q, heap top %d in %d", r0.Address, got, r0.Retained, r0.Count)
	}

	// Paths: heap path's, hop for hop, the Hash marked a dominator.
	visit(t, ctx, s, "#/heap/0/paths?addr="+rep.Path.Target, "heap-paths")
	hops := eval[[][]string](t, ctx, `[...document.querySelectorAll(".path ol")].map(ol => [...ol.querySelectorAll("li a.addr")].map(a => a.innerText))`)
	if len(hops) != len(path.Paths) {
		t.Fatalf("paths: %d, heap path %d", len(hops), len(path.Paths))
	}
	for k, p := range path.Paths {
		var want []string
		for _, h := range p.Hops {
			want = append(want, h.Address)
		}
		if strings.Join(hops[k], " ") != strings.Join(want, " ") {
			t.Errorf("path %d: %v, heap path %v", k, hops[k], want)
		}
	}
	if doms := eval[[]string](t, ctx, `[...document.querySelectorAll(".path li.dom a.addr")].map(a => a.innerText)`); !contains(doms, rep.Path.Hash) {
		t.Errorf("dominator hops %v lack the Hash %s", doms, rep.Path.Hash)
	}

	// Profile: summary's table, the flame graph, the call tree.
	visit(t, ctx, s, "#/profile/1/functions", "profile-functions")
	for _, row := range cells(t, ctx, "#rows") {
		line := fmt.Sprintf("%7s %7s %8s %8s  %s", row[0], row[1], row[2], row[3], row[4])
		if !strings.Contains(summary, "\n"+line+"\n") {
			t.Errorf("function row %q not in report's summary:\n%s", line, summary)
		}
	}
	visit(t, ctx, s, "#/profile/1/flame", "profile-flame")
	sub := eval[string](t, ctx, `document.getElementById("flame").contentDocument.getElementById("subtitle").textContent`)
	if !strings.HasPrefix(sub, "70 samples, ") {
		t.Errorf("flame graph subtitle %q", sub)
	}
	visit(t, ctx, s, "#/profile/1/flame?icicle=1", "profile-icicle")
	if sub := eval[string](t, ctx, `document.getElementById("flame").contentDocument.getElementById("subtitle").textContent`); !strings.HasPrefix(sub, "70 samples, ") {
		t.Errorf("icicle subtitle %q", sub)
	}
	visit(t, ctx, s, "#/profile/1/stack", "profile-stack")
	threads := rawtest.Samples(t, raw, func(_ profile.Sample, fns []string) []string { return fns })
	if n := eval[int](t, ctx, `document.getElementById("stackchart").contentDocument.querySelectorAll("g.track").length`); n != len(threads) {
		t.Errorf("stack chart: %d tracks, the demo's %d threads", n, len(threads))
	}
	visit(t, ctx, s, "#/profile/1/stack?lines=1", "profile-stack-lines")
	visit(t, ctx, s, "#/profile/1/tree", "profile-tree")
	if rows := cells(t, ctx, "#rows"); len(rows) == 0 || rows[0][1] != "70" {
		t.Errorf("call tree: %q", rows)
	}

	// Crashes: crash list's rows, crash show's text.
	visit(t, ctx, s, "#/crashes", "crashes")
	if rows := cells(t, ctx, "#rows"); len(rows) != 1 || rows[0][0] != crashID {
		t.Errorf("crashes: %q", rows)
	}
	visit(t, ctx, s, "#/crash?id="+crashID, "crash")
	text, _, _ := rbscope(t, "crash", "show", crashID, "--config", config)
	if got := eval[string](t, ctx, `document.getElementById("report").textContent`); got != text {
		t.Errorf("crash report on the page differs from crash show")
	}

	// A bad request: one message on the page.
	visitWant(t, ctx, s, "#/heap/2/overview", "error", "error")
	if msg := eval[string](t, ctx, `document.getElementById("error").innerText`); !strings.Contains(msg, "notes.txt: not a heap dump") {
		t.Errorf("view of the bad file: %q", msg)
	}

	for _, p := range problems() {
		if strings.Contains(p, "status of 422") && strings.Contains(p, "/api/heap/overview?f=2&") {
			continue // the bad file's view, asked for above
		}
		t.Error(p)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// crashStoreConfig copies the stored report of a real crash to a store
// and returns the crash handler config naming it, and the crash's ID.
func crashStoreConfig(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	src := testruby.Testdata("golden/crash-store")
	ids, err := os.ReadDir(src)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no stored crash report in %s: %v", src, err)
	}
	id := ids[0].Name()
	store := filepath.Join(dir, "store")
	os.MkdirAll(filepath.Join(store, id), 0o700)
	b, err := os.ReadFile(filepath.Join(src, id, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(store, id, "report.json"), b, 0o600)
	config := filepath.Join(dir, "crash.json")
	os.WriteFile(config, []byte(fmt.Sprintf(`{"dir": %q}`, store)), 0o600)
	return config, id
}
