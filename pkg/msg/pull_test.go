package msg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

func pullTarget() msg.PullTarget {
	return msg.PullTarget{Namespace: "shop", Name: "web", UID: "u-1", Image: "registry.example.com:5000/shop/web:1.2", Node: "ip-10-0-0-1.ec2.internal", Attempt: 1}
}

func TestPullMessagesRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	order := msg.PullOrder{PullTarget: pullTarget(), Mode: msg.PullModeCRI, PullSecrets: []msg.SecretRef{{Namespace: "shop", Name: "regcred"}}, Deadline: at,
		Limits: &msg.PullLimits{Cluster: 10, PerNode: 2, PerRegistry: 4}}
	pulled := msg.Pulled{PullTarget: pullTarget(), Outcome: msg.PullOutcomePulled, ImageRef: "sha256:ab", Digest: "registry.example.com:5000/shop/web@sha256:cd", Size: 42, Duration: time.Second, At: at}
	status := msg.PullStatus{Namespace: "shop", Name: "web", UID: "u-1", Node: "n1", At: at}
	status.Set(msg.ImagePull{Image: "a", Phase: msg.PullPulled, Attempts: 1})
	cases := []struct {
		in, out msg.Message
	}{
		{&order, &msg.PullOrder{}},
		{&pulled, &msg.Pulled{}},
		{&status, &msg.PullStatus{}},
	}
	for _, tc := range cases {
		t.Run(tc.in.Schema(), func(t *testing.T) {
			data, err := msg.Encode(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(data), `{"schema":"`+tc.in.Schema()+`"`) {
				t.Fatalf("schema not first: %s", data)
			}
			if err := msg.Decode(data, tc.out); err != nil {
				t.Fatal(err)
			}
			again, err := msg.Encode(tc.out)
			if err != nil || string(again) != string(data) {
				t.Fatalf("round trip changed the message:\n%s\n%s (%v)", data, again, err)
			}
		})
	}
	// The order flattens its target: a reader sees namespace, name, image
	// and node at the top, and secrets by reference only.
	data, _ := msg.Encode(order)
	for _, want := range []string{`"image":"registry.example.com:5000/shop/web:1.2"`, `"attempt":1`, `"pullSecrets":[{"namespace":"shop","name":"regcred"}]`,
		`"limits":{"cluster":10,"perNode":2,"perRegistry":4}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("order %s lacks %s", data, want)
		}
	}
}

func TestPullMessagesInvalid(t *testing.T) {
	deadline := time.Now()
	order := func(f func(*msg.PullOrder)) msg.Message {
		o := msg.PullOrder{PullTarget: pullTarget(), Mode: msg.PullModeCRI, Deadline: deadline}
		f(&o)
		return o
	}
	pulled := func(f func(*msg.Pulled)) msg.Message {
		p := msg.Pulled{PullTarget: pullTarget(), Outcome: msg.PullOutcomePresent}
		f(&p)
		return p
	}
	cases := []struct {
		name string
		m    msg.Message
		want string
	}{
		{"order without image", order(func(o *msg.PullOrder) { o.Image = "" }), "image is missing"},
		{"order without uid", order(func(o *msg.PullOrder) { o.UID = "" }), "uid is missing"},
		{"order attempt 0", order(func(o *msg.PullOrder) { o.Attempt = 0 }), "attempt 0"},
		{"order unknown mode", order(func(o *msg.PullOrder) { o.Mode = "docker" }), `mode "docker"`},
		{"order without deadline", order(func(o *msg.PullOrder) { o.Deadline = time.Time{} }), "deadline is missing"},
		{"order secret without namespace", order(func(o *msg.PullOrder) { o.PullSecrets = []msg.SecretRef{{Name: "x"}} }), "pullSecrets[0]"},
		{"order secret of another namespace", order(func(o *msg.PullOrder) { o.PullSecrets = []msg.SecretRef{{Namespace: "kube-system", Name: "x"}} }), "kube-system/x is not in the PrePullImage's namespace shop"},
		{"order limit 0", order(func(o *msg.PullOrder) { o.Limits = &msg.PullLimits{Cluster: 1, PerNode: 0, PerRegistry: 1} }), "limits 1/0/1"},
		{"pulled unknown outcome", pulled(func(p *msg.Pulled) { p.Outcome = "maybe" }), `outcome "maybe"`},
		{"failed without error", pulled(func(p *msg.Pulled) { p.Outcome = msg.PullOutcomeFailed }), "needs an error"},
		{"status unknown phase", msg.PullStatus{Namespace: "a", Name: "b", UID: "c", Node: "d", Phase: "Done"}, `phase "Done"`},
		{"status image unknown phase", msg.PullStatus{Namespace: "a", Name: "b", UID: "c", Node: "d", Phase: msg.PullPending, Images: []msg.ImagePull{{Image: "x"}}}, `phase ""`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := msg.Encode(tc.m)
			if !errors.Is(err, msg.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("encode: %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

func TestPullStatusPhase(t *testing.T) {
	cases := []struct {
		name   string
		phases []msg.PullPhase
		want   msg.PullPhase
	}{
		{"all pulled", []msg.PullPhase{msg.PullPulled, msg.PullPulled}, msg.PullPulled},
		{"one pulling", []msg.PullPhase{msg.PullPulled, msg.PullPulling, msg.PullFailed}, msg.PullPulling},
		{"one waiting", []msg.PullPhase{msg.PullFailed, msg.PullPending}, msg.PullPending},
		{"one failed", []msg.PullPhase{msg.PullPulled, msg.PullFailed}, msg.PullFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s msg.PullStatus
			// Images are set in reverse order and one twice: kept sorted,
			// the last state of an image wins.
			for i := len(tc.phases) - 1; i >= 0; i-- {
				img := string(rune('a' + i))
				s.Set(msg.ImagePull{Image: img, Phase: msg.PullFailed})
				s.Set(msg.ImagePull{Image: img, Phase: tc.phases[i]})
			}
			if s.Phase != tc.want {
				t.Fatalf("phase = %s, want %s", s.Phase, tc.want)
			}
			if len(s.Images) != len(tc.phases) {
				t.Fatalf("images = %+v", s.Images)
			}
			for i, p := range tc.phases {
				got, ok := s.Image(string(rune('a' + i)))
				if !ok || got.Phase != p {
					t.Fatalf("image %d = %+v %v, want phase %s", i, got, ok, p)
				}
			}
		})
	}
}

func TestPullKeysAndSubjects(t *testing.T) {
	key := msg.PullStatusKey("shop", "web.v2", "ip-10-0-0-1.ec2.internal")
	if key != "shop.web=2Ev2.ip-10-0-0-1=2Eec2=2Einternal" {
		t.Fatalf("key = %q", key)
	}
	if !strings.HasPrefix(key, msg.PullStatusPrefix("shop", "web.v2")) {
		t.Fatalf("key %q does not start with its prefix", key)
	}
	ns, name, node, err := msg.ParsePullStatusKey(key)
	if err != nil || ns != "shop" || name != "web.v2" || node != "ip-10-0-0-1.ec2.internal" {
		t.Fatalf("ParsePullStatusKey = %q %q %q %v", ns, name, node, err)
	}
	for _, bad := range []string{"a.b", "a.b.c.d", "a.b.=Z"} {
		if _, _, _, err := msg.ParsePullStatusKey(bad); !errors.Is(err, msg.ErrInvalid) {
			t.Errorf("ParsePullStatusKey(%q) = %v", bad, err)
		}
	}
	if s := msg.PullSubject("ip-10-0-0-1.ec2.internal"); s != "weft.pull.ip-10-0-0-1=2Eec2=2Einternal" {
		t.Fatalf("pull subject = %q: the node must stay one token", s)
	}
	if s := msg.PulledSubject("n1"); s != "weft.pulled.n1" {
		t.Fatalf("pulled subject = %q", s)
	}
	a, b := pullTarget(), pullTarget()
	b.Attempt = 2
	if a.ID() == b.ID() {
		t.Fatalf("attempts share the id %q", a.ID())
	}
	b = pullTarget()
	b.UID = "u-2"
	if a.ID() == b.ID() {
		t.Fatalf("a PrePullImage made again shares the id %q", a.ID())
	}
}

// TestPullStreamsProvisioned: orders go to a work queue that a node's
// consumer empties, outcomes to a stream that keeps them, and the other
// streams keep their limits retention.
func TestPullStreamsProvisioned(t *testing.T) {
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range msg.Streams(1) {
		want := jetstream.LimitsPolicy
		if c.Name == msg.StreamPulls {
			want = jetstream.WorkQueuePolicy
		}
		s, err := js.Stream(ctx, c.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Retention; got != want {
			t.Errorf("stream %s retention %v, want %v", c.Name, got, want)
		}
	}
	order := msg.PullOrder{PullTarget: pullTarget(), Mode: msg.PullModeCRI, Deadline: time.Now().Add(time.Minute)}
	for range 2 {
		m, err := msg.NewMsg(msg.PullSubject(order.Node), order.ID(), order)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, msg.StreamPulls, jetstream.ConsumerConfig{
		Durable: "n1", FilterSubject: msg.PullSubject(order.Node), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) != 1 {
		t.Fatalf("orders delivered = %d, want the order once (same id)", len(got))
	}
	if err := got[0].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, msg.StreamPulls)
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 0 {
		t.Fatalf("work queue holds %d orders after the ack (%v), want 0", info.State.Msgs, err)
	}
	kv, err := js.KeyValue(ctx, msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	status := msg.PullStatus{Namespace: "shop", Name: "web", UID: "u-1", Node: order.Node, Phase: msg.PullPending}
	data, _ := msg.Encode(status)
	if _, err := kv.Create(ctx, msg.PullStatusKey(status.Namespace, status.Name, status.Node), data); err != nil {
		t.Fatal(err)
	}
}
