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

// uiIvarPage is what the object page answers of an object's instance
// variables.
type uiIvarPage struct {
	Object uiObject `json:"object"`
	Ivars  []struct {
		Name    string    `json:"name"`
		Object  *uiObject `json:"object"`
		Address string    `json:"address"`
		Value   string    `json:"value"`
	} `json:"instance_variables"`
	IvarsError string `json:"instance_variables_error"`
}

// names returns the page's instance variables that instance_variables
// lists (one @) as "name=value", a value an address or an inspect.
func (p *uiIvarPage) names() string {
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

// TestUIObjectIvars: the object page of a dump rbscope took shows each
// object's instance variables by name, in order, with the values the
// program reports (references as objects of the dump, immediates as their
// inspect), both when the page's server built the dump's index and when it
// read it back; for the program's own dump_all of the same heap it shows
// none, and no error.
func TestUIObjectIvars(t *testing.T) {
	dir := t.TempDir()
	rubyDump := filepath.Join(dir, "dump_all.json")
	p := testruby.Start(t, testruby.Rubies(t)[0], "ivar_names.rb", nil, rubyDump)
	var rep ivarProgram
	p.WaitReport(t, &rep, 60*time.Second)
	dump := filepath.Join(dir, "rbscope.json")
	if _, errOut, code := rbscope(t, "heap", "dump", "-p", strconv.Itoa(rep.PID), "-o", dump); code != 0 {
		t.Fatalf("heap dump: %s", errOut)
	}
	for _, round := range []string{"index built", "index read back"} {
		s := startUI(t, dump, rubyDump)
		files := s.waitLoaded(t)
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
			var mine, theirs uiIvarPage
			s.get(t, "/api/heap/object?f=0&addr="+o.Address, &mine)
			if got := mine.names(); got != strings.Join(want, " ") || mine.IvarsError != "" {
				t.Errorf("%s: %s (%s): the object page shows\n  %s %s\nthe program says\n  %s", round, o.What, o.Address, got, mine.IvarsError, strings.Join(want, " "))
			}
			for _, iv := range mine.Ivars {
				if iv.Object == nil && iv.Value == "" {
					t.Errorf("%s: %s: %s is neither an object of the dump nor an immediate (%q)", round, o.What, iv.Name, iv.Address)
				}
			}
			s.get(t, "/api/heap/object?f=1&addr="+o.Address, &theirs)
			if len(theirs.Ivars) != 0 || theirs.IvarsError != "" {
				t.Errorf("%s: %s in dump_all's dump: %d instance variables, error %q", round, o.What, len(theirs.Ivars), theirs.IvarsError)
			}
		}
		t.Logf("%s: %d objects' instance variables as the program says", round, len(rep.Objects))
	}
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
