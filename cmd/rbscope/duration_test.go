package main

import (
	"strings"
	"testing"
	"time"
)

func TestRecordParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"10", 10 * time.Second, false},
		{"2.5", 2500 * time.Millisecond, false},
		{"0.001", time.Millisecond, false},
		{".5", 500 * time.Millisecond, false},
		{"0", 0, false},
		{"10s", 10 * time.Second, false},
		{"1m", time.Minute, false},
		{"1m30s", 90 * time.Second, false},
		{"500ms", 500 * time.Millisecond, false},
		{" 3 ", 3 * time.Second, false},
		{"-1", -time.Second, false}, // refused by each command's own check
		{"", 0, true},
		{"ten", 0, true},
		{"10 s", 0, true},
		{"NaN", 0, true},
		{"Inf", 0, true},
		{"0x10", 0, true},
		{"1_0", 0, true},
		{"1e30", 0, true},
	} {
		got, err := parseDuration(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestRecordDurationFlagsEverywhere: every duration flag of every command
// takes bare and fractional seconds as well as Go units.
func TestRecordDurationFlagsEverywhere(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		flag string
	}{
		{[]string{"record"}, "duration"},
		{[]string{"top"}, "window"},
		{[]string{"threads"}, "interval"},
		{[]string{"alloc"}, "duration"},
		{[]string{"alloc"}, "timeout"},
		{[]string{"exec"}, "timeout"},
	} {
		for in, want := range map[string]string{"10": "10s", "2.5": "2.5s", "10s": "10s", "1m": "1m0s", "250ms": "250ms"} {
			root := newRootCmd()
			c, _, err := root.Find(tc.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.ParseFlags([]string{"--" + tc.flag, in}); err != nil {
				t.Errorf("%s --%s %s: %v", tc.cmd[0], tc.flag, in, err)
				continue
			}
			if got := c.Flags().Lookup(tc.flag).Value.String(); got != want {
				t.Errorf("%s --%s %s = %s, want %s", tc.cmd[0], tc.flag, in, got, want)
			}
		}
		root := newRootCmd()
		c, _, _ := root.Find(tc.cmd)
		if err := c.ParseFlags([]string{"--" + tc.flag, "soon"}); err == nil || !strings.Contains(err.Error(), "want seconds (10, 2.5)") {
			t.Errorf("%s --%s soon: %v", tc.cmd[0], tc.flag, err)
		}
	}
}
