//go:build race

package engine

// raceEnabled: the race detector slows rendering about tenfold, so the
// randomised tests take fewer steps under it.
const raceEnabled = true
