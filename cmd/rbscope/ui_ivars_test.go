package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// ivarProgram is what testdata/ivar_names.rb writes about itself.
type ivarProgram struct {
	PID     int `json:"pid"`
	Objects []struct {
		What    string      `json:"what"`
		Address string      `json:"address"`
		Ivars   [][2]string `json:"ivars"`
	} `json:"objects"`
}

// TestUIBrowserIvars: in Chromium, the object page of an object of a dump
// rbscope took lists its instance variables by name and value as the
// program reports them, a reference linking to its object's page.
func TestUIBrowserIvars(t *testing.T) {
	ctx, problems := browser(t)
	dir := t.TempDir()
	p := testruby.Start(t, testruby.Rubies(t)[0], "ivar_names.rb", nil)
	var rep ivarProgram
	p.WaitReport(t, &rep, 60*time.Second)
	dump := filepath.Join(dir, "rbscope.json")
	if _, errOut, code := rbscope(t, "heap", "dump", "-p", strconv.Itoa(rep.PID), "-o", dump); code != 0 {
		t.Fatalf("heap dump: %s", errOut)
	}
	s := startUI(t, dump)
	s.waitLoaded(t)
	for _, o := range rep.Objects {
		if o.What != "kinds" && o.What != "generic_string" {
			continue
		}
		visit(t, ctx, s, "#/heap/0/object?addr="+o.Address, "heap-object-ivars")
		var got, want []string
		for _, row := range cells(t, ctx, "#ivars") {
			got = append(got, row[0]+"="+row[1])
		}
		for _, iv := range o.Ivars {
			want = append(want, iv[0]+"="+iv[1])
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: the page shows\n  %v\nthe program says\n  %v", o.What, got, want)
		}
		links := eval[[]string](t, ctx, `[...document.querySelectorAll("#ivars td.ivar-value a.addr")].map(a => a.getAttribute("href"))`)
		refs := 0
		for _, iv := range o.Ivars {
			if strings.HasPrefix(iv[1], "0x") {
				refs++
			}
		}
		if len(links) != refs || refs == 0 {
			t.Errorf("%s: %d links among the values, %d references", o.What, len(links), refs)
		}
	}
	if pr := problems(); len(pr) > 0 {
		t.Errorf("the page: %v", pr)
	}
}
