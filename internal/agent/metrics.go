package agent

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the agent's own: what it profiles and how its uploads fare,
// with the Go runtime's and its process's (CPU seconds, memory).
type Metrics struct {
	registry  *prometheus.Registry
	processes prometheus.Gauge
	samples   prometheus.Counter
	uploads   *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	queue     prometheus.Gauge
}

// NewMetrics makes the agent's metrics in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry:  prometheus.NewRegistry(),
		processes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rbscope_agent_processes", Help: "Ruby processes being profiled."}),
		samples:   prometheus.NewCounter(prometheus.CounterOpts{Name: "rbscope_agent_samples_total", Help: "Samples taken, over all processes."}),
		uploads:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rbscope_agent_uploads_total", Help: "Profile uploads by outcome (ok, failed: each failed attempt)."}, []string{"result"}),
		dropped:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rbscope_agent_uploads_dropped_total", Help: "Profiles dropped unsent, by reason: queue_full (the server was away), rejected (refused as invalid), unencodable."}, []string{"reason"}),
		queue:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "rbscope_agent_upload_queue_length", Help: "Profiles waiting for the server."}),
	}
	m.registry.MustRegister(m.processes, m.samples, m.uploads, m.dropped, m.queue,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	m.uploads.WithLabelValues("ok")
	m.uploads.WithLabelValues("failed")
	for _, r := range []string{"queue_full", "rejected", "unencodable"} {
		m.dropped.WithLabelValues(r)
	}
	return m
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
