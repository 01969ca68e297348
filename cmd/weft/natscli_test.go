package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

func TestNATSCLI(t *testing.T) {
	cli := testkit.GoTool(t, "github.com/nats-io/natscli/nats")
	s := deployedOnce(t, nil)
	nats := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, cli, append([]string{"--server", s.bus.URL}, args...)...).CombinedOutput()
		return string(out), err
	}

	// Everyone can watch everything: a subscriber on weft.> sees the forced
	// render and the stages after it.
	var subOut testkit.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, cli, "--server", s.bus.URL, "sub", "weft.>", "--count", "4")
	sub.Stdout, sub.Stderr = &subOut, &subOut
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "subscriber ready", func() error {
		if !strings.Contains(subOut.String(), "Subscribing on") {
			return errNotYet
		}
		return nil
	})
	renders := s.streamCount(msg.StreamRenders, msg.RenderSubject("quickstart"))
	if out, err := nats("pub", msg.TriggerRenderSubject("quickstart"), ""); err != nil {
		t.Fatalf("nats pub: %v: %s", err, out)
	}
	waitFor(t, "forced render", func() error {
		if n := s.streamCount(msg.StreamRenders, msg.RenderSubject("quickstart")); n != renders+1 {
			return fmt.Errorf("renders = %d, want %d", n, renders+1)
		}
		return nil
	})
	if err := sub.Wait(); err != nil {
		t.Fatalf("nats sub: %v: %s", err, subOut.String())
	}
	for _, want := range []string{msg.TriggerRenderSubject("quickstart"), msg.RenderSubject("quickstart"), msg.ValidatedSubject("quickstart")} {
		if !strings.Contains(subOut.String(), want) {
			t.Errorf("nats sub output lacks %s:\n%s", want, subOut.String())
		}
	}

	cases := []struct {
		args []string
		want string
	}{
		{[]string{"req", msg.APIStatus, ""}, `"target":"quickstart"`},
		{[]string{"kv", "get", msg.BucketStatus, msg.RenderStatusKey("quickstart"), "--raw"}, msg.SchemaRenderStatus},
		{[]string{"stream", "ls", "--names"}, msg.StreamRenders},
	}
	for _, tc := range cases {
		out, err := nats(tc.args...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("nats %v: %v\n%s", tc.args, err, out)
		}
	}
}
