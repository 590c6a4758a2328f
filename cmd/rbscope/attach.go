package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// vmOptions are the root command's options for finding a Ruby VM
// (--force-version), used by every command that opens one: openRuby, the
// sampler's (record, top) and core. Their one BuildCache lets the
// processes of one Ruby image that a run reads (record --subprocesses of
// a server's workers, the agent's) share what is read of it.
var vmOptions = rubyvm.Options{Builds: rubyvm.NewBuildCache()}

// openRuby attaches to a live process and finds its Ruby VM. The returned
// close releases both.
func openRuby(pid int) (*target.Live, *rubyvm.VM, func(), error) {
	t, err := target.Attach(pid)
	if err != nil {
		return nil, nil, nil, err
	}
	vm, err := rubyvm.OpenWith(t, vmOptions)
	if err != nil {
		t.Close()
		return nil, nil, nil, err
	}
	return t, vm, func() { vm.Close(); t.Close() }, nil
}

// whilePaused runs read with every thread of the target stopped, when
// pause is set, in one target.WhilePaused session: the threads run again
// whatever read returns, and read runs on the tracer thread.
func whilePaused(t *target.Live, pause bool, read func() error) error {
	if !pause {
		return read()
	}
	return t.WhilePaused(nil, func(*target.Stopped) error { return read() })
}

// schemaVersion is the version of the shape of every command's --json
// document, its schema_version key. It changes when a key is renamed or
// removed or a value changes meaning; new keys keep it.
const schemaVersion = 1

// printJSON prints the JSON object v on stdout, schema_version first.
func printJSON(v any) error { return writeJSON(os.Stdout, v) }

// printJSONList prints a list as the JSON object {"schema_version": N,
// key: list} on stdout.
func printJSONList(key string, list any) error {
	b, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	return writeJSON(os.Stdout, map[string]json.RawMessage{key: b})
}

// writeJSON prints the JSON object v as indented JSON with schema_version
// as its first key.
func writeJSON(w io.Writer, v any) error {
	b, err := versioned(v)
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

// versioned encodes the JSON object v with schema_version as its first
// key.
func versioned(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding JSON: %w", err)
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("encoding JSON: %T is not an object", v)
	}
	head := fmt.Sprintf(`{"schema_version":%d`, schemaVersion)
	if string(b) == "{}" {
		return []byte(head + "}"), nil
	}
	return append([]byte(head+","), b[1:]...), nil
}
