package msg_test

import (
	"testing"

	"github.com/weftio/weft/pkg/msg"
)

// fuzzDecoder runs one decoder over arbitrary input: it must never panic,
// and whatever it accepts must encode again.
func fuzzDecoder[T msg.Message](f *testing.F, newT func() T, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"schema":"weft.x.v1"}`))
	f.Add([]byte(`{"schema":"weft.x.v99"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newT()
		if err := msg.Decode(data, m); err != nil {
			if !msg.IsPermanent(err) {
				t.Fatalf("decode error is not permanent: %v", err)
			}
			return
		}
		if _, err := msg.Encode(m); err != nil {
			t.Fatalf("accepted message does not encode: %v", err)
		}
	})
}

func FuzzDecodeChange(f *testing.F) {
	fuzzDecoder(f, func() *msg.Change { return new(msg.Change) },
		`{"schema":"weft.change.v1","source":"m","type":"t","key":"k","name":"a","op":"put","revision":1}`)
}

func FuzzDecodeSync(f *testing.F) {
	fuzzDecoder(f, func() *msg.Sync { return new(msg.Sync) }, `{"schema":"weft.sync.v1","source":"m","type":"t","count":2}`)
}

func FuzzDecodeRender(f *testing.F) {
	fuzzDecoder(f, func() *msg.Render { return new(msg.Render) },
		`{"schema":"weft.render.v1","target":"t","version":1,"bundleHash":"h"}`,
		`{"schema":"weft.render.v1","target":"t","version":1,"failure":{"template":"x","message":"m"}}`)
}

func FuzzDecodeValidateRequest(f *testing.F) {
	fuzzDecoder(f, func() *msg.ValidateRequest { return new(msg.ValidateRequest) },
		`{"schema":"weft.validate.v1","target":"t","version":1,"bundleHash":"h"}`)
}

func FuzzDecodeValidateReply(f *testing.F) {
	fuzzDecoder(f, func() *msg.ValidateReply { return new(msg.ValidateReply) },
		`{"schema":"weft.validatereply.v1","kind":"haproxy","ok":false,"problems":[{"file":"a","line":1,"message":"m"}]}`)
}

func FuzzDecodeValidated(f *testing.F) {
	fuzzDecoder(f, func() *msg.Validated { return new(msg.Validated) },
		`{"schema":"weft.validated.v1","target":"t","bundleHash":"h","ok":true}`)
}

func FuzzDecodeDeployOrder(f *testing.F) {
	fuzzDecoder(f, func() *msg.DeployOrder { return new(msg.DeployOrder) },
		`{"schema":"weft.deploy.v1","target":"t","instance":"i","bundleHash":"h"}`)
}

func FuzzDecodeDeployed(f *testing.F) {
	fuzzDecoder(f, func() *msg.Deployed { return new(msg.Deployed) },
		`{"schema":"weft.deployed.v1","target":"t","instance":"i","outcome":"applied"}`)
}

func FuzzDecodeTrigger(f *testing.F) {
	fuzzDecoder(f, func() *msg.Trigger { return new(msg.Trigger) }, `{"schema":"weft.trigger.v1","reason":"x"}`)
}

func FuzzDecodeDeadLetter(f *testing.F) {
	fuzzDecoder(f, func() *msg.DeadLetter { return new(msg.DeadLetter) },
		`{"schema":"weft.deadletter.v1","service":"s","subject":"x","reason":"r"}`)
}

func FuzzDecodeBundle(f *testing.F) {
	b, _ := msg.NewBundle("t", "/b", "a", []msg.BundleFile{{Path: "a", Kind: msg.FileConfig, Content: []byte("x")}})
	seed, _ := msg.EncodeBundle(b)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := msg.DecodeBundle(data)
		if err != nil {
			if !msg.IsPermanent(err) {
				t.Fatalf("not permanent: %v", err)
			}
			return
		}
		if got.Consistent() != nil {
			t.Fatal("accepted an inconsistent bundle")
		}
	})
}

func FuzzResourceKey(f *testing.F) {
	f.Add("default", "web.example.com")
	f.Add("", "=x")
	f.Fuzz(func(t *testing.T, ns, name string) {
		if name == "" {
			return
		}
		k := msg.ResourceKey("s", "t", ns, name)
		_, _, gns, gname, err := msg.ParseResourceKey(k)
		if err != nil || gns != ns || gname != name {
			t.Fatalf("round trip of %q/%q via %q: %q/%q %v", ns, name, k, gns, gname, err)
		}
	})
}

func FuzzDecodeFetch(f *testing.F) {
	fuzzDecoder(f, func() *msg.FetchRequest { return new(msg.FetchRequest) },
		`{"schema":"weft.fetch.v1","type":"secrets","namespace":"a","name":"b"}`)
}

func FuzzDecodeFetchReply(f *testing.F) {
	fuzzDecoder(f, func() *msg.FetchReply { return new(msg.FetchReply) },
		`{"schema":"weft.fetchreply.v1","object":{"a":1}}`, `{"schema":"weft.fetchreply.v1","error":"x"}`)
}

func FuzzDecodeConfig(f *testing.F) {
	fuzzDecoder(f, func() *msg.Config { return new(msg.Config) }, `{"schema":"weft.config.v1","hash":"h","yaml":"a: 1"}`)
}

func FuzzDecodeHeartbeat(f *testing.F) {
	fuzzDecoder(f, func() *msg.Heartbeat { return new(msg.Heartbeat) },
		`{"schema":"weft.heartbeat.v1","kind":"haproxy","replica":"host.example-12","at":"2026-01-02T03:04:05Z"}`)
}

func FuzzDecodePullOrder(f *testing.F) {
	fuzzDecoder(f, func() *msg.PullOrder { return new(msg.PullOrder) },
		`{"schema":"weft.pullorder.v1","namespace":"a","name":"b","uid":"u","image":"r/i:1","node":"n","attempt":1,"mode":"cri","pullSecrets":[{"namespace":"a","name":"s"}],"deadline":"2026-01-02T03:04:05Z"}`)
}

func FuzzDecodePulled(f *testing.F) {
	fuzzDecoder(f, func() *msg.Pulled { return new(msg.Pulled) },
		`{"schema":"weft.pulled.v1","namespace":"a","name":"b","uid":"u","image":"r/i:1","node":"n","attempt":1,"outcome":"failed","error":"not found"}`)
}

func FuzzDecodePullStatus(f *testing.F) {
	fuzzDecoder(f, func() *msg.PullStatus { return new(msg.PullStatus) },
		`{"schema":"weft.pullstatus.v1","namespace":"a","name":"b","uid":"u","node":"n","phase":"Pulled","images":[{"image":"r/i:1","phase":"Pulled","attempts":1}]}`)
}

func FuzzPullStatusKey(f *testing.F) {
	f.Add("default", "web.v2", "ip-10-0-0-1.ec2.internal")
	f.Fuzz(func(t *testing.T, ns, name, node string) {
		k := msg.PullStatusKey(ns, name, node)
		gns, gname, gnode, err := msg.ParsePullStatusKey(k)
		if err != nil || gns != ns || gname != name || gnode != node {
			t.Fatalf("round trip of %q/%q/%q via %q: %q/%q/%q %v", ns, name, node, k, gns, gname, gnode, err)
		}
	})
}
