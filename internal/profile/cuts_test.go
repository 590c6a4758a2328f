package profile

import (
	"strings"
	"testing"
	"time"
)

// cutSample is a recording of two threads: "web" (tid 11) serving two
// endpoints through one helper, and "tid 12" running a job; stacks carry
// the labels ctxlabels would give them.
func cutSample() *Profile {
	f := func(label string, line int) Frame {
		return Frame{Kind: KindRuby, Label: label, Path: "app.rb", Line: line}
	}
	p := NewProfile(100)
	p.KeepTimeline()
	add := func(n int, tid int, thread string, labels []Label, frames ...Frame) {
		for range n {
			si := p.AddSample(frames, p.Start.Add(time.Duration(p.Samples)*time.Millisecond), 10, tid, thread)
			p.Stacks[si].Labels = labels
		}
	}
	index := []Label{{LabelEndpoint, "ItemsController#index"}}
	show := []Label{{LabelEndpoint, "ItemsController#show"}}
	add(6, 11, "web", index, f("main", 1), f("ItemsController#index", 3), f("Object#spin", 20))
	add(2, 11, "web", index, f("main", 1), f("ItemsController#index", 4), Frame{Kind: KindCFunc, Label: "Kernel#sleep"})
	add(3, 11, "web", show, f("main", 1), f("ItemsController#show", 8), f("Object#spin", 21))
	add(1, 11, "web", nil, f("main", 1), f("Rack#call", 30))
	add(4, 12, "tid 12", []Label{{LabelJob, "HardJob"}}, f("main", 1), f("HardJob#perform", 40), f("Object#spin", 20))
	return p
}

func TestFilters(t *testing.T) {
	p := cutSample()
	for _, tc := range []struct {
		spec    string
		samples int
	}{
		{"thread:web", 12},
		{"thread:12", 4},     // a TID
		{"thread:tid 12", 4}, // the name profiles give an unnamed thread
		{"thread:w.*", 12},   // a regular expression matching the whole name
		{"thread:we", 0},     // not a part of a name
		{"endpoint:ItemsController#index", 8},
		{"endpoint:ItemsController#.*", 11},
		{"job:HardJob", 4},
		{"thread:web\nendpoint:ItemsController#show", 3},
		{"focus:Object#spin (app.rb)\nthread:web", 9}, // filters first, whatever the order
	} {
		ts, err := ParseTransforms(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		q, err := p.Apply(ts)
		if err != nil {
			t.Fatal(err)
		}
		if q.Samples != tc.samples || len(q.Timeline) != tc.samples {
			t.Errorf("%q: %d samples (%d in the timeline), want %d", tc.spec, q.Samples, len(q.Timeline), tc.samples)
		}
		for _, st := range q.Stacks {
			if strings.Contains(tc.spec, "endpoint:") && st.Label(LabelEndpoint) == "" {
				t.Errorf("%q: a stack kept without its endpoint label", tc.spec)
			}
		}
	}
	if _, err := ParseTransforms("color:red"); err == nil || !strings.Contains(err.Error(), "thread:NAME|TID") {
		t.Errorf("an unknown transform: %v", err)
	}
	agg := &Profile{Frames: p.Frames, Stacks: p.Stacks, Samples: p.Samples}
	if _, err := agg.Apply([]Transform{{Op: "thread", Function: "web"}}); err != ErrNoTimeline {
		t.Errorf("a thread cut of a profile without a timeline: %v", err)
	}
	if q, err := agg.Apply([]Transform{{Op: LabelJob, Function: "HardJob"}}); err != nil || q.Samples != 4 {
		t.Errorf("a label cut of a profile without a timeline: %v, %v", q, err)
	}
}

func TestNoMatch(t *testing.T) {
	p := cutSample()
	for spec, want := range map[string]string{
		"thread:nobody":     `--thread "nobody": no sample is of a thread so named (whole, or as a regular expression) or with that TID; the recording's threads: "web" (tid 11), "tid 12" (tid 12)`,
		"endpoint:X#y":      `--endpoint "X#y": no sample has that endpoint (whole, or as a regular expression); the recording's: "ItemsController#index", "ItemsController#show"`,
		"job:Nope":          `--job "Nope": no sample has that job (whole, or as a regular expression); the recording's: "HardJob"`,
		"thread:11\njob:.*": "",
		"focus:anything\n":  "",
	} {
		ts, _ := ParseTransforms(spec)
		err := p.NoMatch(ts)
		if got := ""; err != nil {
			got = err.Error()
			if got != want {
				t.Errorf("%q: %q, want %q", spec, got, want)
			}
		} else if want != "" {
			t.Errorf("%q: no error, want %q", spec, want)
		}
	}
}

func TestBy(t *testing.T) {
	p := cutSample()
	g, err := p.By(LabelEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 3 || g[0].Name != "ItemsController#index" || g[0].Samples != 8 || g[0].Top.Label != "Object#spin" || g[0].TopSelf != 6 ||
		g[1].Name != "" || g[1].Samples != 5 || g[2].Name != "ItemsController#show" || g[2].Samples != 3 {
		t.Errorf("by endpoint: %+v", g)
	}
	g, err = p.By("thread")
	if err != nil || len(g) != 2 || g[0].Name != "web" || g[0].TID != 11 || g[0].Samples != 12 || g[1].Samples != 4 {
		t.Errorf("by thread: %+v, %v", g, err)
	}
}

func TestSandwichOf(t *testing.T) {
	p := cutSample()
	sw := p.SandwichOf("Object#spin (app.rb)", false)
	if sw.Total != 13 || sw.Self != 13 || sw.Callers["ItemsController#index (app.rb)"] != 6 || sw.Callers["HardJob#perform (app.rb)"] != 4 || len(sw.Callees) != 0 {
		t.Errorf("spin: %+v", sw)
	}
	sw = p.SandwichOf("ItemsController#index (app.rb)", true)
	if sw.Total != 8 || sw.Callers["main (app.rb:1)"] != 8 || sw.Callees["line 3: Object#spin (app.rb)"] != 6 || sw.Callees["line 4: Kernel#sleep (cfunc)"] != 2 {
		t.Errorf("index by line: %+v", sw)
	}
	sw = p.SandwichOf("Object#spin (app.rb)", true)
	if sw.SelfLines[20] != 10 || sw.SelfLines[21] != 3 {
		t.Errorf("spin's own lines: %v", sw.SelfLines)
	}
}
