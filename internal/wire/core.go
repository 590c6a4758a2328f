package wire

import "github.com/rbscope/rbscope/internal/rubyvm"

// CoreInfo is what every core document says of the core first.
type CoreInfo struct {
	Core      string `json:"core"`
	Command   string `json:"command"`
	Signal    string `json:"signal,omitempty"`
	SignalTID int    `json:"signal_tid,omitempty"`
}

// Core is the document `rbscope core --json` prints: the core, its
// process's Ruby stacks and, with --census, the heap census.
type Core struct {
	CoreInfo
	Stack
	// Census is there with --census (an empty census is []).
	Census *[]CensusRow `json:"census,omitempty"`
}

// CoreNative is the document `rbscope core --native --json` prints.
type CoreNative struct {
	CoreInfo
	// Fault names the fault beneath a signal handler.
	Fault string `json:"fault,omitempty"`
	NativeStack
}

// CensusRow is one type and class of a heap census: how many live objects
// and the bytes they hold.
type CensusRow struct {
	Type  string `json:"type"`
	Class string `json:"class"`
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// NewCensusRows maps a census's rows (never nil: an empty census is []).
func NewCensusRows(rows []rubyvm.CensusRow) []CensusRow {
	out := make([]CensusRow, len(rows))
	for i, r := range rows {
		out[i] = CensusRow{Type: r.Type, Class: r.Class, Count: r.Count, Bytes: r.Bytes}
	}
	return out
}
