//go:build race

package testkit

// raceEnabled reports whether this binary was built with the race
// detector; GoBuild then builds with it too.
const raceEnabled = true
