package agent

import (
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsExposition: what the metrics handler serves parses as
// Prometheus's text format (with Prometheus's own parser), with each
// family's type and the values the agent set, the process's and the Go
// runtime's beside them.
func TestMetricsExposition(t *testing.T) {
	m := NewMetrics()
	m.processes.Set(3)
	m.samples.Add(250)
	m.uploads.WithLabelValues("ok").Inc()
	m.dropped.WithLabelValues("rejected").Add(2)
	m.queue.Set(7)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	value := func(name, label, lv string) (float64, dto.MetricType, bool) {
		f := families[name]
		if f == nil {
			return 0, 0, false
		}
		for _, s := range f.Metric {
			if label != "" && (len(s.Label) != 1 || s.Label[0].GetName() != label || s.Label[0].GetValue() != lv) {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return s.GetCounter().GetValue(), f.GetType(), true
			case dto.MetricType_GAUGE:
				return s.GetGauge().GetValue(), f.GetType(), true
			}
		}
		return 0, f.GetType(), false
	}
	for _, c := range []struct {
		name, label, lv string
		typ             dto.MetricType
		want            float64
	}{
		{"rbscope_agent_processes", "", "", dto.MetricType_GAUGE, 3},
		{"rbscope_agent_samples_total", "", "", dto.MetricType_COUNTER, 250},
		{"rbscope_agent_uploads_total", "result", "ok", dto.MetricType_COUNTER, 1},
		{"rbscope_agent_uploads_total", "result", "failed", dto.MetricType_COUNTER, 0},
		{"rbscope_agent_uploads_dropped_total", "reason", "rejected", dto.MetricType_COUNTER, 2},
		{"rbscope_agent_uploads_dropped_total", "reason", "queue_full", dto.MetricType_COUNTER, 0},
		{"rbscope_agent_upload_queue_length", "", "", dto.MetricType_GAUGE, 7},
	} {
		got, typ, ok := value(c.name, c.label, c.lv)
		if !ok || typ != c.typ || got != c.want {
			t.Errorf("%s{%s=%q}: %v %v (found %v), want %v %v", c.name, c.label, c.lv, typ, got, ok, c.typ, c.want)
		}
	}
	for _, name := range []string{"process_resident_memory_bytes", "process_open_fds", "go_memstats_heap_inuse_bytes", "go_goroutines"} {
		if v, _, ok := value(name, "", ""); !ok || v <= 0 {
			t.Errorf("%s: %v (found %v), want above 0", name, v, ok)
		}
	}
	if _, typ, ok := value("process_cpu_seconds_total", "", ""); !ok || typ != dto.MetricType_COUNTER {
		t.Errorf("process_cpu_seconds_total: %v (found %v)", typ, ok)
	}
}
