// Package wire holds every document rbscope writes for programs to read:
// the --json output of each command, the crash handler's report.json and
// config, the raw recording's header. Each document has its own structs
// here, mapped from the model packages (stacks, rubyvm, heap, alloctrace,
// crashreport, profile), so that a field renamed in the code never renames a key
// users rely on. docs/json.md documents each document and key;
// TestDocumented holds the two together.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SchemaVersion is the version of the shape of every JSON document, its
// schema_version key. It changes when a key is renamed or removed or a
// value changes meaning; new keys keep it. 2: a native frame is spelled
// one way (NativeFrame) in every document, the crash report's included
// (it was addr, symbol and file), and report.json carries the version.
const SchemaVersion = 2

// Write writes the JSON object v as indented JSON with schema_version as
// its first key.
func Write(w io.Writer, v any) error {
	b, err := Versioned(v)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// Versioned encodes the JSON object v with schema_version as its first
// key.
func Versioned(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding JSON: %w", err)
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("encoding JSON: %T is not an object", v)
	}
	head := fmt.Sprintf(`{"schema_version":%d`, SchemaVersion)
	if string(b) == "{}" {
		return []byte(head + "}"), nil
	}
	return append([]byte(head+","), b[1:]...), nil
}

// hex writes an address as the documents do: "0x7f3a...".
func hex(v uint64) string { return fmt.Sprintf("%#x", v) }

// hexKnown is hex for an address of which 0 means unknown: "" then.
func hexKnown(v uint64) string {
	if v == 0 {
		return ""
	}
	return hex(v)
}

// unhex reads an address hex wrote ("" and a malformed one are 0).
func unhex(s string) uint64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	return v
}
