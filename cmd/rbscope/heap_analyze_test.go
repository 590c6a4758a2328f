package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

func TestHeapDiffPathTop(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			dir := t.TempDir()
			before, after := filepath.Join(dir, "before.json"), filepath.Join(dir, "after.json")
			p := testruby.Start(t, rb, "heap_graph_diff.rb", nil, before, after)
			var drep struct {
				Leaky uint64 `json:"leaky"`
				Site  string `json:"site"`
			}
			p.WaitReport(t, &drep, 60*time.Second)

			// diff --json: Leaky x 5000, the largest row.
			stdout, stderr, code := rbscope(t, "heap", "diff", before, after, "--json")
			if code != 0 {
				t.Fatalf("diff: exit %d: %s", code, stderr)
			}
			var diff struct {
				NewObjects uint64 `json:"new_objects"`
				By         string `json:"by"`
				Rows       []struct {
					Class, Type string
					Count       uint64
					Bytes       uint64
				} `json:"rows"`
			}
			if err := json.Unmarshal([]byte(stdout), &diff); err != nil {
				t.Fatalf("diff --json: %v\n%s", err, stdout)
			}
			if len(diff.Rows) == 0 || diff.Rows[0].Class != "Leaky" || diff.Rows[0].Type != "OBJECT" || diff.Rows[0].Count != drep.Leaky || diff.By != "class" {
				t.Errorf("diff rows %+v, want Leaky OBJECT x %d first", diff.Rows, drep.Leaky)
			}
			stdout, _, code = rbscope(t, "heap", "diff", before, after)
			if want := `(?m)^Leaky +OBJECT +5000 +\d+$`; code != 0 || !regexp.MustCompile(want).MatchString(stdout) {
				t.Errorf("diff text lacks %s:\n%s", want, stdout)
			}
			stdout, _, code = rbscope(t, "heap", "diff", before, after, "--by", "site", "--top", "1")
			if want := `(?m)^` + regexp.QuoteMeta(drep.Site) + ` +Leaky +OBJECT +5000 +\d+$`; code != 0 || !regexp.MustCompile(want).MatchString(stdout) ||
				!strings.Contains(stdout, "more (--top 0 prints all)") {
				t.Errorf("diff --by site lacks %s:\n%s", want, stdout)
			}

			// path and top on heap_graph.rb's dump.
			dump := filepath.Join(dir, "graph.json")
			p = testruby.Start(t, rb, "heap_graph.rb", nil, dump)
			var grep struct {
				Hash string `json:"hash"`
				Path struct {
					Module, Array, Hash, Target, Value string
				} `json:"path"`
			}
			p.WaitReport(t, &grep, 60*time.Second)
			stdout, stderr, code = rbscope(t, "heap", "path", dump, grep.Path.Target, "--all", "3", "--json")
			if code != 0 {
				t.Fatalf("path: exit %d: %s", code, stderr)
			}
			var path struct {
				Address string   `json:"address"`
				Holders []string `json:"holders"`
				Paths   []struct {
					Root string `json:"root"`
					Hops []struct {
						Address, Type, Class, Desc string
					} `json:"hops"`
				} `json:"paths"`
			}
			if err := json.Unmarshal([]byte(stdout), &path); err != nil {
				t.Fatalf("path --json: %v\n%s", err, stdout)
			}
			if path.Address != grep.Path.Target || len(path.Paths) == 0 || len(path.Paths[0].Hops) < 4 {
				t.Fatalf("path --json: %s", stdout)
			}
			// The known chain is among the shortest paths (on 3.4 an
			// inline constant cache holds the Array as well, as short).
			hops := path.Paths[0].Hops[len(path.Paths[0].Hops)-4:]
			chain := []string{grep.Path.Module, grep.Path.Array, grep.Path.Hash, grep.Path.Target}
			onChain := false
			for _, pa := range path.Paths {
				if len(pa.Hops) < 4 {
					continue
				}
				h := pa.Hops[len(pa.Hops)-4:]
				ok := true
				for k, want := range chain {
					ok = ok && h[k].Address == want
				}
				if ok {
					hops, onChain = h, true
					break
				}
			}
			if !onChain {
				t.Errorf("no path ends in the chain %v; output:\n%s", chain, stdout)
			}
			if hops[0].Desc != "PathHolder" || hops[1].Class != "Array" || hops[2].Class != "Hash" || !strings.Contains(hops[3].Desc, grep.Path.Value) {
				t.Errorf("hops %+v", hops)
			}
			stdout, _, code = rbscope(t, "heap", "path", dump, grep.Path.Target, "--all", "3")
			for _, want := range []string{`(?m)^path 1: \d+ objects from root \w+$`, `(?m)^  ` + grep.Path.Module + ` +MODULE +Module +PathHolder$`,
				`(?m)^  ` + grep.Path.Target + ` +STRING +String +.*` + regexp.QuoteMeta(grep.Path.Value)} {
				if code != 0 || !regexp.MustCompile(want).MatchString(stdout) {
					t.Errorf("path text lacks %s:\n%s", want, stdout)
				}
			}

			stdout, stderr, code = rbscope(t, "heap", "top", dump, "--top", "200", "--json")
			if code != 0 {
				t.Fatalf("top: exit %d: %s", code, stderr)
			}
			var top struct {
				Objects   int `json:"objects"`
				Reachable int `json:"reachable"`
				Retainers []struct {
					Address   string
					Class     string
					Retained  uint64
					Count     uint64
					Memsize   uint64
					Dominator string
				} `json:"retainers"`
			}
			if err := json.Unmarshal([]byte(stdout), &top); err != nil {
				t.Fatalf("top --json: %v\n%s", err, stdout)
			}
			found := false
			for k, r := range top.Retainers {
				if k > 0 && r.Retained > top.Retainers[k-1].Retained {
					t.Errorf("retainers not largest first")
				}
				if r.Address == grep.Hash {
					found = r.Class == "Hash" && r.Count >= 1001 && r.Retained > r.Memsize
				}
			}
			if !found || top.Reachable > top.Objects || len(top.Retainers) != 200 {
				t.Errorf("top: the hash %s not among %d retainers (or wrong): %s", grep.Hash, len(top.Retainers), stdout)
			}
			stdout, _, code = rbscope(t, "heap", "top", dump, "--top", "5")
			if code != 0 || !regexp.MustCompile(`(?m)^RETAINED +COUNT +SELF +ADDRESS +TYPE +CLASS +DOMINATOR +DESC$`).MatchString(stdout) ||
				strings.Count(stdout, "\n") != 8 {
				t.Errorf("top text:\n%s", stdout)
			}
		})
	}
}

func TestHeapAnalyzeErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`{"type":"ROOT", "root":"vm", "references":["0x10"]}
{"address":"0x10", "type":"ARRAY", "length":1, "references":["0x18"], "memsize":40}
{"address":"0x18", "type":"STRING", "value":"x", "memsize":40}
{"address":"0x20", "type":"STRING", "value":"garbage", "memsize":40}
`), 0o644)
	os.WriteFile(bad, []byte(`{"address":"0x10", "type":"ARRAY"}
{"address":"0x18", "type":"STRING", "value":"x"`), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"heap", "path", good, "0x99"}, 1, "rbscope: 0x99 is not in " + good + " (3 objects): no object at that address when the dump was taken\n"},
		{[]string{"heap", "path", good, "nothex"}, 2, `rbscope: bad address "nothex": want hexadecimal, like 0x7f3fa78f2058` + "\n"},
		{[]string{"heap", "path", good}, 2, "rbscope: want a dump file and an object ADDRESS, got 1 argument(s) (see 'rbscope heap path --help')\n"},
		{[]string{"heap", "top", bad}, 1, "rbscope: " + bad + " line 2: invalid JSON: unexpected end of JSON input\n"},
		{[]string{"heap", "diff", good, bad}, 1, "rbscope: " + bad + " line 2: invalid JSON: unexpected end of JSON input\n"},
		{[]string{"heap", "diff", good, filepath.Join(dir, "none.json")}, 1, "rbscope: open " + filepath.Join(dir, "none.json") + ": no such file or directory\n"},
		{[]string{"heap", "diff", good}, 2, "rbscope: want two or three dump files, BEFORE AFTER [LATER], got 1 argument(s) (see 'rbscope heap diff --help')\n"},
		{[]string{"heap", "diff", good, good, good, good}, 2, "rbscope: want two or three dump files, BEFORE AFTER [LATER], got 4 argument(s) (see 'rbscope heap diff --help')\n"},
		{[]string{"heap", "diff", good, good, bad}, 1, "rbscope: " + bad + " line 2: invalid JSON: unexpected end of JSON input\n"},
		{[]string{"heap", "diff", good, good, "--by", "size"}, 2, `rbscope: --by "size": want class or site (see 'rbscope heap diff --help')` + "\n"},
		{[]string{"heap", "diff", good, good, "--by", "site"}, 1, "rbscope: " + good + " has no allocation sites (file/line): dump after ObjectSpace.trace_object_allocations_start, or use --by class\n"},
		{[]string{"heap", "top", good, "--top", "x"}, 2, ""},
	} {
		stdout, stderr, code := rbscope(t, tc.args...)
		if code != tc.code || (tc.want != "" && stderr != tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q stdout %q; want exit %d, %q", tc.args[1:], code, stderr, stdout, tc.code, tc.want)
		}
	}
	// An object no root reaches: said so, exit 0.
	stdout, stderr, code := rbscope(t, "heap", "path", good, "0x20")
	if code != 0 || !strings.Contains(stdout, "not reachable from the roots") || stderr != "" {
		t.Errorf("unreachable: exit %d, %q %q", code, stdout, stderr)
	}
	stdout, _, code = rbscope(t, "heap", "path", good, "0x18")
	if code != 0 || !strings.Contains(stdout, "path 1: 2 objects from root vm") {
		t.Errorf("path: exit %d:\n%s", code, stdout)
	}
}
