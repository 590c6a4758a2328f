package main

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestUICuts: the UI's profile views cut a recording of testdata/cuts.rb
// by thread and endpoint, as report does: the page offers each thread
// and endpoint ("Cut by"), a cut keeps the samples the program's own
// thread or action had, and a cut matching nothing is an error naming
// what there is.
func TestUICuts(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	p := testruby.Start(t, rb, "cuts.rb", nil, "60")
	var rep cutsReport
	p.WaitReport(t, &rep, 30*time.Second)
	raw := filepath.Join(t.TempDir(), "cuts.raw.gz")
	if _, errOut, code := rbscope(t, "record", "-p", strconv.Itoa(p.PID()), "-d", "3", "-r", "200", "-f", "raw", "-o", raw); code != 0 {
		t.Fatalf("record: exit %d: %s", code, errOut)
	}
	all := readRawFile(t, raw)
	byThread := map[int]int{}
	for _, s := range all.Timeline {
		byThread[s.TID]++
	}
	index := 0
	for _, st := range all.Stacks {
		if st.Label("endpoint") == "ItemsController#index" {
			index += st.Count
		}
	}
	s := startUI(t, raw)
	s.waitLoaded(t)
	type row struct {
		Name    string
		TID     int
		Samples int
		Cut     string
	}
	var cuts struct{ Threads, Endpoints []row }
	s.get(t, "/api/profile/cuts?f=0", &cuts)
	find := func(rows []row, cut string) *row {
		for i := range rows {
			if rows[i].Cut == cut {
				return &rows[i]
			}
		}
		return nil
	}
	if r := find(cuts.Threads, "thread:cruncher"); r == nil || r.TID != rep.TIDs["cruncher"] || r.Samples != byThread[r.TID] {
		t.Errorf("cuts: cruncher %+v, want tid %d with %d samples: %+v", r, rep.TIDs["cruncher"], byThread[rep.TIDs["cruncher"]], cuts.Threads)
	}
	if r := find(cuts.Endpoints, "endpoint:ItemsController#index"); r == nil || r.Samples != index || index == 0 {
		t.Errorf("cuts: ItemsController#index %+v, want %d samples: %+v", r, index, cuts.Endpoints)
	}
	var fn struct{ Samples int }
	s.get(t, "/api/profile/functions?f=0&t="+url.QueryEscape("thread:"+strconv.Itoa(rep.TIDs["cruncher"])), &fn)
	if fn.Samples != byThread[rep.TIDs["cruncher"]] {
		t.Errorf("functions cut to cruncher's TID: %d samples, want %d", fn.Samples, byThread[rep.TIDs["cruncher"]])
	}
	resp, err := http.Get(s.base + "/api/profile/functions?f=0&t=" + url.QueryEscape("thread:nobody") + "&token=" + s.token)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 200 || !strings.Contains(string(b), `\"cruncher\"`) {
		t.Errorf("a cut to no thread: %d %s, want an error naming the threads", resp.StatusCode, b)
	}

	ctx, problems := browser(t)
	visit(t, ctx, s, "#/profile/0/functions", "profile-cuts")
	href := eval[string](t, ctx, `document.querySelector('#cuts a[data-cut="endpoint:ItemsController#index"]').getAttribute("href")`)
	visit(t, ctx, s, href, "profile-cut-endpoint")
	if got := eval[string](t, ctx, `document.getElementById("transforms").innerText`); !strings.Contains(got, "endpoint ItemsController#index") {
		t.Errorf("the page's transforms after the cut: %q", got)
	}
	if got := eval[string](t, ctx, `document.querySelector(".summary").innerText`); !strings.Contains(got, ": "+commas(uint64(index))+" samples") {
		t.Errorf("the page cut to ItemsController#index: %q, want %d samples", got, index)
	}
	if p := problems(); len(p) > 0 {
		t.Errorf("the page: %v", p)
	}
}
