package rubyvm

import (
	"errors"
	"testing"
)

func TestFamily(t *testing.T) {
	for _, tc := range []struct {
		version, family string
		unsupported     bool
	}{
		{"3.1.7", "3.1", false},
		{"3.3.8", "3.3", false},
		{"3.4.0", "3.4", false},
		{"4.0.0", "4.0", false},
		{"3.0.6", "3.0", false}, // a family: refused later, for want of a layout
		{"2.7.8", "2.7", false},
		{"2.6.10", "", true},
		{"1.9.3", "", true},
		{"garbage", "", true},
		{"", "", true},
	} {
		got, err := Family(tc.version)
		if tc.unsupported {
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("Family(%q) = %q, %v; want ErrUnsupported", tc.version, got, err)
			}
			continue
		}
		if err != nil || got != tc.family {
			t.Errorf("Family(%q) = %q, %v; want %q", tc.version, got, err, tc.family)
		}
	}
}
