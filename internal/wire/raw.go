package wire

// RawFormat is the format name in a raw recording's header.
const RawFormat = "rbscope-raw"

// RawVersion is the version of the raw recording format that `rbscope
// record -f raw` writes and the newest `rbscope report` reads. A raw
// recording carries it in its header's version key, not schema_version.
const RawVersion = 1

// RawHeader is the first line of a raw recording (`rbscope record -f
// raw`): a gzipped stream of JSON values, one a line, the header then the
// records.
type RawHeader struct {
	// Format is RawFormat; Version the recording's version.
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Title is --title.
	Title string `json:"title,omitempty"`
	// Rate is the requested sampling rate in Hz; StartNs and DurationNs
	// bound the run (Unix nanoseconds, nanoseconds).
	Rate       float64 `json:"rate"`
	StartNs    int64   `json:"start_ns"`
	DurationNs int64   `json:"duration_ns"`
	// Ticks counts the sampling ticks, Errors the samples that could not
	// be read, Waiting the runnable threads left out of a tick because
	// they waited for a CPU, Samples the stacks the records hold.
	Ticks   int `json:"ticks"`
	Errors  int `json:"errors"`
	Waiting int `json:"waiting"`
	Samples int `json:"samples"`
	// Timeline says the samples carry their time and thread ("t"
	// records).
	Timeline bool `json:"timeline"`
	// Labels are the context labels of the recording's stacks (endpoint
	// and job, package ctxlabels), in the header so that a reader that
	// knows no labels reads the recording as before; absent from a
	// recording made before labels were kept, whose reader derives them
	// from its frames.
	Labels *RawLabels `json:"labels,omitempty"`
}

// RawLabels are the labels of a raw recording's stacks: each distinct set
// once, and the stacks that have one.
type RawLabels struct {
	// Sets are the distinct sets of labels, each an object of a value by
	// key ({"endpoint": "IssuesController#show"}).
	Sets []map[string]string `json:"sets"`
	// Stacks pairs a stack number with the number of its set in Sets,
	// for every stack with labels.
	Stacks [][2]int `json:"stacks"`
}

// The records of a raw recording, after its header: JSON arrays whose
// first element is one of these names. A frame, stack or thread record
// comes before its first use; each is numbered from 0 in order.
const (
	RawFrame  = "f"  // ["f", kind, label, path, line]
	RawStack  = "s"  // ["s", [frame numbers, root first]]
	RawThread = "th" // ["th", pid, tid, name]
	RawSample = "t"  // ["t", ns since start, thread number, stack number]
	RawCount  = "n"  // ["n", stack number, count]: samples without time
)
