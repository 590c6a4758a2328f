package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// durationValue is the one flag type of every duration rbscope takes
// (record --duration, top --window, threads --interval, alloc --duration
// and --timeout, exec --timeout): whole or fractional seconds ("10",
// "2.5"), as rbspy and py-spy take them, or a Go duration ("10s", "1m",
// "500ms").
type durationValue time.Duration

// parseDuration reads a duration as durationValue takes it.
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if secs, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "xXpP_") {
		// A bare number is seconds (hexadecimal and digit separators,
		// which ParseFloat also reads, are refused).
		if math.IsNaN(secs) || math.IsInf(secs, 0) || math.Abs(secs) > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("%q is not a duration we can hold", s)
		}
		return time.Duration(math.Round(secs * float64(time.Second))), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want seconds (10, 2.5) or a number with a unit (500ms, 10s, 1m)")
	}
	return d, nil
}

// Set implements pflag.Value.
func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// String implements pflag.Value. Zero is "0", which pflag's help takes
// for no default.
func (d *durationValue) String() string {
	if *d == 0 {
		return "0"
	}
	return time.Duration(*d).String()
}

// Type implements pflag.Value.
func (d *durationValue) Type() string { return "duration" }

// durationFlag defines a duration flag on fs that stores into p, with a
// default of value.
func durationFlag(fs *pflag.FlagSet, p *time.Duration, name, short string, value time.Duration, usage string) {
	*p = value
	fs.VarP((*durationValue)(p), name, short, usage+" (seconds, as 10 or 2.5, or with a unit: 500ms, 1m)")
}
