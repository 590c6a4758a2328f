package sampler

import (
	"math/rand/v2"
	"time"
)

// sampleClock gives the sampling instants: one in each period of a fixed
// grid, at a uniformly random point of it (jittered sampling), Rate of them
// a second on average.
//
// Instants evenly spaced can alias with the target's scheduling: on a busy
// CPU the kernel hands out time at its scheduler ticks (every 4 ms at
// CONFIG_HZ=250), and a period that is a simple fraction or multiple of the
// tick (10 ms, 2.5 ms, 1 ms) then looks at a program whose turns on the
// CPU begin at the same places of its code at a few points of those turns
// only. Beside two CPU spinners at 100 Hz (bench/contention.sh), evenly
// spaced instants were up to 9 points off for one phase of a program in
// one run of eight, jittered ones within 4.5.
type sampleClock struct {
	period time.Duration
	slot   time.Time // start of the period the next instant falls in
	timer  *time.Timer
	// C receives each instant; after each, the receiver calls next.
	C <-chan time.Time
}

func newSampleClock(period time.Duration) *sampleClock {
	c := &sampleClock{period: period, slot: time.Now()}
	c.timer = time.NewTimer(c.pick(time.Now()))
	c.C = c.timer.C
	return c
}

// next arms the clock for the instant after the one just received. A
// period whose instant has passed (the last sample ran late) is skipped,
// as a time.Ticker drops ticks.
func (c *sampleClock) next() {
	c.slot = c.slot.Add(c.period)
	c.timer.Reset(c.pick(time.Now()))
}

// pick draws the next instant at or after now, moving c.slot to its
// period, and returns how long until it.
func (c *sampleClock) pick(now time.Time) time.Duration {
	if behind := now.Sub(c.slot); behind > c.period {
		c.slot = c.slot.Add(behind / c.period * c.period)
	}
	for {
		at := c.slot.Add(rand.N(c.period))
		if !at.Before(now) {
			return at.Sub(now)
		}
		c.slot = c.slot.Add(c.period)
	}
}

// Stop releases the clock's timer.
func (c *sampleClock) Stop() { c.timer.Stop() }
