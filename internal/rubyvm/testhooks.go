//go:build rbscope_testhooks

package rubyvm

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// In a binary built with -tags rbscope_testhooks (the tests' own, never a
// release), RBSCOPE_TEST_SHIFT="Field:+8[,Field:-8...]" moves layout
// fields of whatever layout a process is read through (a table or DWARF),
// as a patch release that moved them would (a field the layout lacks
// makes the command exit 3, saying so): the tests check that every
// command then refuses, or says what it left out, and never prints a wrong
// frame, label or object.
func init() {
	spec := os.Getenv("RBSCOPE_TEST_SHIFT")
	if spec == "" {
		return
	}
	layoutHook = func(l *layout.Layout) *layout.Layout {
		c := *l
		v := reflect.ValueOf(&c).Elem()
		for _, item := range strings.Split(spec, ",") {
			name, by, _ := strings.Cut(item, ":")
			n, err := strconv.ParseInt(by, 10, 64)
			f := v.FieldByName(name)
			if err != nil || !f.IsValid() || f.Kind() != reflect.Int64 {
				panic(fmt.Sprintf("RBSCOPE_TEST_SHIFT: bad item %q", item))
			}
			if f.Int() < 0 {
				// a field this layout lacks: nothing to move
				fmt.Fprintf(os.Stderr, "RBSCOPE_TEST_SHIFT: %s is absent from this layout\n", name)
				os.Exit(3)
			}
			f.SetInt(f.Int() + n)
		}
		return &c
	}
}
