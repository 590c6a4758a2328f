package layout

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Resolver answers the queries of the layout tags: kind is one of off,
// bitoff, bits, size, count or enum, and what is one member path, type or
// enumerator name. The run-time DWARF reader is one Resolver; layoutgen's
// re-layout of another ABI's DWARF is another.
type Resolver interface {
	Value(kind, what string) (int64, error)
}

// Feature names what a group of layout fields serves. A field a feature
// needs that a Ruby build lacks disables that feature only.
type Feature string

// The features, each needing the fields of the ones before it.
const (
	// FeatureStack is finding the VM, its threads and their Ruby stacks:
	// stack, record, top, threads, core, exec and alloc need it.
	FeatureStack Feature = "stack"
	// FeatureCensus is walking the GC heap (heap census, core --census).
	FeatureCensus Feature = "census"
	// FeatureDump is decoding every object's references (heap dump).
	FeatureDump Feature = "dump"
	// FeatureLocks is naming what a thread waits on and what it holds
	// (Mutexes, Queues, joins): it builds on the stack's fields only,
	// and no other feature needs it.
	FeatureLocks Feature = "locks"
)

// features lists the features in the order they build on each other;
// FeatureLocks stands beside them, on the stack's.
var features = []Feature{FeatureStack, FeatureCensus, FeatureDump}

// needs reports whether feature f needs a field tagged need:"g".
func needs(f, g Feature) bool {
	if f == FeatureLocks || g == FeatureLocks {
		return g == f || g == FeatureStack
	}
	for _, x := range features {
		if x == g {
			return true // g is at or before f in the order
		}
		if x == f {
			return false
		}
	}
	return false
}

// Missing is a field the Ruby build did not have: which feature needs it
// and what was looked for.
type Missing struct {
	Field     string
	Need      Feature
	LookedFor string
	Reason    string
}

// Build reads every field of a Layout from r. A field that is not found
// and not optional is recorded in Layout.Missing against the feature that
// needs it; Build fails only when a field every feature needs (the stack's)
// is missing, naming each such field.
func Build(r Resolver, family, source string) (*Layout, error) {
	l := &Layout{Family: family, Source: source}
	var fatal []error
	v := reflect.ValueOf(l).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if m, ok := sf.Tag.Lookup("macro"); ok {
			n, err := macroValue(m, family)
			if err != nil {
				return nil, fmt.Errorf("layout field %s: %w", sf.Name, err)
			}
			v.Field(i).SetInt(n)
			continue
		}
		tag, ok := sf.Tag.Lookup("dwarf")
		if !ok {
			continue
		}
		spec, optional := strings.CutSuffix(tag, ",optional")
		kind, whats, _ := strings.Cut(spec, ":")
		var val int64
		var errs []error
		found := false
		for _, what := range strings.Split(whats, "|") {
			x, err := r.Value(kind, what)
			if err == nil {
				val, found = x, true
				break
			}
			errs = append(errs, err)
		}
		need := Feature(sf.Tag.Get("need"))
		if need == "" {
			need = FeatureStack
		}
		switch {
		case found:
			v.Field(i).SetInt(val)
		case optional:
			v.Field(i).SetInt(-1)
		case need == FeatureStack:
			fatal = append(fatal, fmt.Errorf("%s (%s %s): %w", sf.Name, kind, strings.ReplaceAll(whats, "|", " or "), errors.Join(errs...)))
		default:
			v.Field(i).SetInt(-1)
			l.Missing = append(l.Missing, Missing{Field: sf.Name, Need: need,
				LookedFor: kind + " " + strings.ReplaceAll(whats, "|", " or "),
				Reason:    strings.ReplaceAll(errors.Join(errs...).Error(), "\n", "; ")})
		}
	}
	if len(fatal) > 0 {
		return nil, fmt.Errorf("the debug info lacks what reading stacks needs: %w", errors.Join(fatal...))
	}
	return l, nil
}

// Supports says whether the layout has every field feature f needs; when
// not, the error names the first missing field, what was looked for and
// where (the layout's source).
func (l *Layout) Supports(f Feature) error {
	for _, m := range l.Missing {
		if needs(f, m.Need) {
			return fmt.Errorf("the Ruby %s layout (%s) has no %s (looked for %s): %w", l.Family, l.Source, m.Field, m.LookedFor, ErrFeatureMissing)
		}
	}
	return nil
}

// ErrFeatureMissing means a feature needs a field this Ruby's layout lacks.
var ErrFeatureMissing = errors.New("this Ruby's layout lacks a field the feature needs")
