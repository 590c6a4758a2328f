package main

import (
	"encoding/json"
	"testing"
)

// censusRow is one row of `heap census --json`.
type censusRow struct {
	Type  string `json:"type"`
	Class string `json:"class"`
	Count int    `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// censusJSON decodes what `heap census --json` prints.
func censusJSON(t *testing.T, out string) []censusRow {
	t.Helper()
	var doc struct {
		Classes []censusRow `json:"classes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("heap census --json: %v\n%.500s", err, out)
	}
	return doc.Classes
}

// censusCount sums the counts of the rows of a type and class ("" for any).
func censusCount(rows []censusRow, typ, class string) int {
	n := 0
	for _, r := range rows {
		if (typ == "" || r.Type == typ) && (class == "" || r.Class == class) {
			n += r.Count
		}
	}
	return n
}

// allocSite is one site of `alloc --json`.
type allocSite struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Class string `json:"class"`
	Count uint64 `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// allocJSON decodes what `alloc --json` prints: its schema version and
// sites.
func allocJSON(t *testing.T, out string) (int, []allocSite) {
	t.Helper()
	var doc struct {
		SchemaVersion int         `json:"schema_version"`
		Sites         []allocSite `json:"sites"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("alloc --json: %v\n%.500s", err, out)
	}
	return doc.SchemaVersion, doc.Sites
}
