package renderer

import "testing"

// SetRenderHook runs fn inside every render's read of the index, before
// the templates run, until the test ends. Set it before the service
// starts.
func SetRenderHook(t testing.TB, fn func(target string)) {
	testHookRender = fn
	t.Cleanup(func() { testHookRender = nil })
}
