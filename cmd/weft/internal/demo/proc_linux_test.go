package demo

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestHAProxyOutlivesTheThreadThatStartedIt: the parent-death signal
// follows the OS thread that forked HAProxy, and Go ends a thread whose
// goroutine exits locked to it. HAProxy started by such a goroutine keeps
// serving: it stops with weft, not with a thread of weft.
func TestHAProxyOutlivesTheThreadThatStartedIt(t *testing.T) {
	listen := freeAddr(t, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type started struct {
		hp  *HAProxy
		err error
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		hp, err := startHAProxy(t, ctx, listen)
		ch <- started{hp, err}
	}()
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	// The thread ends as its goroutine returns; its parent-death signal
	// would reach HAProxy within moments.
	select {
	case <-s.hp.done:
		t.Fatalf("haproxy stopped when the thread that started it ended: %v; last output: %s", s.hp.err, s.hp.out.last())
	case <-time.After(3 * time.Second):
	}
	if got := get(listen, "x"); got != "503 waiting for weft's first configuration" {
		t.Fatalf("haproxy answered %q", got)
	}
	cancel()
	if err := s.hp.Wait(); err != nil {
		t.Fatal(err)
	}
}
