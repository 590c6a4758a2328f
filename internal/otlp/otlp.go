// Package otlp writes rbscope's profiles as OpenTelemetry profiles: an
// OTLP ExportProfilesServiceRequest (the profiles signal of version
// SignalVersion, through the collector's pdata modules), and sends it to
// an OTLP/HTTP endpoint.
//
// One profile becomes one ResourceProfiles: the resource's attributes are
// the process's (service.name, process.pid, host.name, the runtime and
// the user's tags), the scope is rbscope, and the profile has a sample
// per distinct stack, its value the samples counted, with the sampling
// period in nanoseconds of CPU or wall-clock time, and the stack's Labels
// as its attributes (the agent's endpoint and job). A frame is a location
// of one line: Ruby code by its label, file and line; a C method by its
// label, with "<cfunc>" for a file, as the pprof output names them.
package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/rbscope/rbscope/internal/profile"
)

// SignalVersion is the version of the OTLP profiles signal rbscope
// speaks, and Path where an OTLP/HTTP receiver takes it.
const (
	SignalVersion = "v1development"
	Path          = "/" + SignalVersion + "/profiles"
)

// ScopeName names rbscope as the instrumentation scope of its profiles.
const ScopeName = "rbscope"

// resourceKeys maps the agent's labels (those the Pyroscope Ruby gem
// sends) to OpenTelemetry's resource attributes; other labels (the
// user's tags, process.runtime.*) keep their names.
var resourceKeys = map[string]string{
	"service_name": "service.name",
	"hostname":     "host.name",
	"pid":          "process.pid",
}

// Encode returns p as the protobuf of an ExportProfilesServiceRequest,
// with labels (the agent's, "__name__" left out) as the resource's
// attributes and version as the scope's.
func Encode(p *profile.Profile, labels map[string]string, version string) ([]byte, error) {
	req := pprofileotlp.NewExportRequestFromProfiles(Profiles(p, labels, version))
	b, err := req.MarshalProto()
	if err != nil {
		return nil, fmt.Errorf("encoding the OTLP profile: %w", err)
	}
	return b, nil
}

// Profiles maps p to OpenTelemetry profiles (see Encode).
func Profiles(p *profile.Profile, labels map[string]string, version string) pprofile.Profiles {
	ps := pprofile.NewProfiles()
	d := newDictionary(ps.Dictionary())
	rp := ps.ResourceProfiles().AppendEmpty()
	attrs := rp.Resource().Attributes()
	for k, v := range labels {
		if k == "__name__" {
			continue
		}
		if name, ok := resourceKeys[k]; ok {
			k = name
		}
		if k == "process.pid" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				attrs.PutInt(k, n)
				continue
			}
		}
		attrs.PutStr(k, v)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(ScopeName)
	sp.Scope().SetVersion(version)
	prof := sp.Profiles().AppendEmpty()

	clock := "cpu"
	if p.Wall {
		clock = "wall"
	}
	prof.SampleType().SetTypeStrindex(d.str("samples"))
	prof.SampleType().SetUnitStrindex(d.str("count"))
	prof.PeriodType().SetTypeStrindex(d.str(clock))
	prof.PeriodType().SetUnitStrindex(d.str("nanoseconds"))
	if p.Rate > 0 {
		prof.SetPeriod(int64(float64(time.Second) / p.Rate))
	}
	prof.SetTime(pcommon.NewTimestampFromTime(p.Start))
	prof.SetDurationNano(uint64(max(p.Duration, 0)))

	locs := make([]int32, len(p.Frames)) // 0: not yet in the table
	samples := prof.Samples()
	samples.EnsureCapacity(len(p.Stacks))
	for _, st := range p.Stacks {
		if st.Count <= 0 {
			continue
		}
		stack := d.stacks.AppendEmpty()
		idx := stack.LocationIndices()
		idx.EnsureCapacity(len(st.Frames))
		for i := len(st.Frames) - 1; i >= 0; i-- { // the leaf first, as in pprof
			fi := st.Frames[i]
			if locs[fi] == 0 {
				locs[fi] = d.location(p.Frames[fi])
			}
			idx.Append(locs[fi])
		}
		s := samples.AppendEmpty()
		s.SetStackIndex(int32(d.stacks.Len() - 1))
		s.Values().Append(int64(st.Count))
		for _, l := range st.Labels {
			s.AttributeIndices().Append(d.attribute(l))
		}
	}
	return ps
}

// dictionary fills the tables profiles share, each entry once: index 0 of
// every table is its zero value, as the signal asks.
type dictionary struct {
	d          pprofile.ProfilesDictionary
	stacks     pprofile.StackSlice
	strings    map[string]int32
	functions  map[profile.Frame]int32
	attributes map[profile.Label]int32
}

func newDictionary(d pprofile.ProfilesDictionary) *dictionary {
	t := &dictionary{d: d, stacks: d.StackTable(), strings: map[string]int32{}, functions: map[profile.Frame]int32{}, attributes: map[profile.Label]int32{}}
	t.str("")
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	return t
}

// str returns s's index in the string table.
func (t *dictionary) str(s string) int32 {
	if i, ok := t.strings[s]; ok {
		return i
	}
	i := int32(t.d.StringTable().Len())
	t.d.StringTable().Append(s)
	t.strings[s] = i
	return i
}

// attribute returns the index of l in the attribute table, a string
// attribute of l's key and value.
func (t *dictionary) attribute(l profile.Label) int32 {
	if i, ok := t.attributes[l]; ok {
		return i
	}
	a := t.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(t.str(l.Key))
	a.Value().SetStr(l.Value)
	i := int32(t.d.AttributeTable().Len() - 1)
	t.attributes[l] = i
	return i
}

// location adds a location of one line for f and returns its index.
func (t *dictionary) location(f profile.Frame) int32 {
	fk := f.Function()
	fi, ok := t.functions[fk]
	if !ok {
		fn := t.d.FunctionTable().AppendEmpty()
		fn.SetNameStrindex(t.str(fk.Label))
		fn.SetSystemNameStrindex(t.str(fk.Label))
		file := fk.Path
		if f.Kind == profile.KindCFunc {
			file = "<cfunc>"
		}
		fn.SetFilenameStrindex(t.str(file))
		fi = int32(t.d.FunctionTable().Len() - 1)
		t.functions[fk] = fi
	}
	loc := t.d.LocationTable().AppendEmpty()
	line := loc.Lines().AppendEmpty()
	line.SetFunctionIndex(fi)
	line.SetLine(int64(f.Line))
	return int32(t.d.LocationTable().Len() - 1)
}

// Client sends profiles to an OTLP/HTTP endpoint.
type Client struct {
	// Endpoint is the receiver's base URL (http://collector:4318); the
	// request goes to Endpoint + Path.
	Endpoint string
	// HTTP sends the requests; Header is added to each.
	HTTP   *http.Client
	Header http.Header
}

// StatusError is an answer of the receiver other than success.
type StatusError struct {
	Code   int
	Status string
	Body   string
}

func (e *StatusError) Error() string {
	if e.Body != "" {
		return fmt.Sprintf("%s: %s (%s)", Path, e.Status, e.Body)
	}
	return fmt.Sprintf("%s: %s", Path, e.Status)
}

// Send posts one encoded request (Encode's).
func (c *Client) Send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.Endpoint, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		e := &StatusError{Code: resp.StatusCode, Status: resp.Status}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/") {
			e.Body = strings.TrimSpace(strings.ToValidUTF8(string(msg), "?"))
		}
		return e
	}
	return nil
}
