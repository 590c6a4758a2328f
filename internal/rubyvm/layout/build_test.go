package layout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeResolver answers every query with 8, except those it lacks.
type fakeResolver struct{ lacks map[string]bool }

func (f fakeResolver) Value(kind, what string) (int64, error) {
	if f.lacks[what] {
		return 0, fmt.Errorf("%s not in DWARF", what)
	}
	return 8, nil
}

// TestMissingFieldDisablesOnlyItsFeature: a Ruby lacking a field of the
// heap census still gets a layout for stacks; the census and the dump
// (built on it) are refused naming the field, the version family, where
// the layout came from and what was looked for; a missing stack field
// fails the layout, naming it.
func TestMissingFieldDisablesOnlyItsFeature(t *testing.T) {
	r := fakeResolver{lacks: map[string]bool{"rb_vm_struct.objspace": true, "rb_vm_struct.gc.objspace": true}}
	l, err := Build(r, "9.9", "dwarf:/x/libruby.so")
	if err != nil {
		t.Fatalf("a missing census field failed the whole layout: %v", err)
	}
	if err := l.Supports(FeatureStack); err != nil {
		t.Errorf("stacks refused: %v", err)
	}
	for _, f := range []Feature{FeatureCensus, FeatureDump} {
		err := l.Supports(f)
		if !errors.Is(err, ErrFeatureMissing) {
			t.Fatalf("%s: %v, want ErrFeatureMissing", f, err)
		}
		for _, want := range []string{"9.9", "dwarf:/x/libruby.so", "VMObjspace", "rb_vm_struct.objspace or rb_vm_struct.gc.objspace"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", f, err, want)
			}
		}
	}

	r = fakeResolver{lacks: map[string]bool{"RObject.as.ary": true}}
	if l, err = Build(r, "9.9", "table"); err != nil {
		t.Fatal(err)
	}
	if l.Supports(FeatureCensus) != nil || l.Supports(FeatureDump) == nil {
		t.Errorf("a missing dump field: census %v, dump %v; want only the dump refused", l.Supports(FeatureCensus), l.Supports(FeatureDump))
	}

	r = fakeResolver{lacks: map[string]bool{"rb_thread_struct.ec": true}}
	if _, err := Build(r, "9.9", "table"); err == nil || !strings.Contains(err.Error(), "ThreadEC") {
		t.Errorf("a missing stack field: %v, want an error naming ThreadEC", err)
	}
}
