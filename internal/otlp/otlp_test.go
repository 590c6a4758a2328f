package otlp

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rbscope/rbscope/internal/profile"
)

// Decoded is a profile read back from an ExportProfilesServiceRequest
// with the collector's own modules: its resource attributes, its sample
// and period types, and its stacks as "label (file:line)" frames, the
// root first, with their counts.
type decoded struct {
	attrs      map[string]string
	sampleType string
	periodType string
	period     int64
	stacks     map[string]int64
}

func decode(t *testing.T, b []byte) decoded {
	t.Helper()
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(b); err != nil {
		t.Fatal(err)
	}
	ps := req.Profiles()
	d := ps.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	if ps.ResourceProfiles().Len() != 1 {
		t.Fatalf("%d resources", ps.ResourceProfiles().Len())
	}
	rp := ps.ResourceProfiles().At(0)
	out := decoded{attrs: map[string]string{}, stacks: map[string]int64{}}
	for k, v := range rp.Resource().Attributes().All() {
		out.attrs[k] = v.AsString()
	}
	sp := rp.ScopeProfiles().At(0)
	if sp.Scope().Name() != ScopeName {
		t.Errorf("scope %q", sp.Scope().Name())
	}
	prof := sp.Profiles().At(0)
	out.sampleType = str(prof.SampleType().TypeStrindex()) + "/" + str(prof.SampleType().UnitStrindex())
	out.periodType = str(prof.PeriodType().TypeStrindex()) + "/" + str(prof.PeriodType().UnitStrindex())
	out.period = prof.Period()
	for _, s := range prof.Samples().All() {
		var frames []string
		for _, li := range d.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
			ln := d.LocationTable().At(int(li)).Lines().At(0)
			fn := d.FunctionTable().At(int(ln.FunctionIndex()))
			frames = append(frames, fmt.Sprintf("%s (%s:%d)", str(fn.NameStrindex()), str(fn.FilenameStrindex()), ln.Line()))
		}
		slices.Reverse(frames)
		out.stacks[strings.Join(frames, ";")] += s.Values().At(0)
	}
	return out
}

// TestEncodeRoundTrip: a profile encoded and read back with the
// collector's modules has the process's attributes, the sampling period,
// and each stack with its count, frames in order.
func TestEncodeRoundTrip(t *testing.T) {
	p := profile.NewProfile(100)
	p.Duration = 5 * time.Second
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "/app/main.rb", Line: 3}
	work := profile.Frame{Kind: profile.KindRuby, Label: "Worker#run", Path: "/app/worker.rb", Line: 10}
	sleep := profile.Frame{Kind: profile.KindCFunc, Label: "Kernel#sleep"}
	p.Add([]profile.Frame{main, work}, 7)
	p.Add([]profile.Frame{main, work, sleep}, 2)
	p.Add([]profile.Frame{main, work}, 1)
	b, err := Encode(p, map[string]string{"__name__": "process_cpu", "service_name": "billing", "pid": "4242",
		"hostname": "web-1", "env": "prod"}, "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, b)
	for k, v := range map[string]string{"service.name": "billing", "process.pid": "4242", "host.name": "web-1", "env": "prod"} {
		if got.attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q (%v)", k, got.attrs[k], v, got.attrs)
		}
	}
	if _, ok := got.attrs["__name__"]; ok {
		t.Errorf("__name__ is an attribute: %v", got.attrs)
	}
	if got.sampleType != "samples/count" || got.periodType != "cpu/nanoseconds" || got.period != 10_000_000 {
		t.Errorf("types %s, %s, period %d", got.sampleType, got.periodType, got.period)
	}
	want := map[string]int64{
		"<main> (/app/main.rb:3);Worker#run (/app/worker.rb:10)":                          8,
		"<main> (/app/main.rb:3);Worker#run (/app/worker.rb:10);Kernel#sleep (<cfunc>:0)": 2,
	}
	if fmt.Sprint(got.stacks) != fmt.Sprint(want) {
		t.Errorf("stacks %v, want %v", got.stacks, want)
	}
	p.Wall = true
	b, _ = Encode(p, nil, "")
	if got := decode(t, b); got.periodType != "wall/nanoseconds" {
		t.Errorf("a wall profile's period type %s", got.periodType)
	}
}

// TestEncodeSampleLabels: a stack's labels are its sample's attributes,
// each key and value once in the attribute table; a stack without labels
// has no attribute.
func TestEncodeSampleLabels(t *testing.T) {
	p := profile.NewProfile(100)
	main := profile.Frame{Kind: profile.KindRuby, Label: "<main>", Path: "/app/main.rb", Line: 3}
	show := profile.Frame{Kind: profile.KindRuby, Label: "IssuesController#show", Path: "/app/issues.rb", Line: 9}
	edit := profile.Frame{Kind: profile.KindRuby, Label: "IssuesController#edit", Path: "/app/issues.rb", Line: 20}
	a := p.Add([]profile.Frame{main, show}, 3)
	b := p.Add([]profile.Frame{main, show, main}, 2)
	c := p.Add([]profile.Frame{main, edit}, 1)
	p.Add([]profile.Frame{main}, 5)
	p.Stacks[a].Labels = []profile.Label{{Key: "endpoint", Value: "IssuesController#show"}}
	p.Stacks[b].Labels = []profile.Label{{Key: "endpoint", Value: "IssuesController#show"}, {Key: "job", Value: "SpinJob"}}
	p.Stacks[c].Labels = []profile.Label{{Key: "endpoint", Value: "IssuesController#edit"}}
	body, err := Encode(p, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		t.Fatal(err)
	}
	d := req.Profiles().Dictionary()
	got := map[string]int64{}
	for _, s := range req.Profiles().ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().All() {
		var kv []string
		for _, ai := range s.AttributeIndices().All() {
			a := d.AttributeTable().At(int(ai))
			kv = append(kv, d.StringTable().At(int(a.KeyStrindex()))+"="+a.Value().AsString())
		}
		got[strings.Join(kv, ",")] += s.Values().At(0)
	}
	want := map[string]int64{"endpoint=IssuesController#show": 3, "endpoint=IssuesController#show,job=SpinJob": 2, "endpoint=IssuesController#edit": 1, "": 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples by attributes %v, want %v", got, want)
	}
	if n := d.AttributeTable().Len(); n != 4 { // the zero entry and three
		t.Errorf("%d entries in the attribute table, want 4", n)
	}
}
