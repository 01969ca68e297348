package msg_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

func TestDecodeErrors(t *testing.T) {
	good, err := msg.Encode(msg.Change{Source: "m", Type: "ingresses", Key: "m.ingresses.default.a", Op: msg.OpPut, Name: "a", Revision: 3})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		data string
		want error
	}{
		{"good", string(good), nil},
		{"not json", "hello", msg.ErrMalformed},
		{"empty", "", msg.ErrMalformed},
		{"array", "[1,2]", msg.ErrMalformed},
		{"no schema", `{"source":"m"}`, msg.ErrMalformed},
		{"bad schema", `{"schema":"change"}`, msg.ErrMalformed},
		{"other type", `{"schema":"weft.render.v1","target":"x"}`, msg.ErrMalformed},
		{"future major", strings.Replace(string(good), "weft.change.v1", "weft.change.v2", 1), msg.ErrUnknownVersion},
		{"missing field", `{"schema":"weft.change.v1","source":"m","type":"t","key":"k","op":"put","revision":1}`, msg.ErrInvalid},
		{"bad op", `{"schema":"weft.change.v1","source":"m","type":"t","key":"k","name":"a","op":"upsert","revision":1}`, msg.ErrInvalid},
		{"wrong field type", `{"schema":"weft.change.v1","source":"m","type":"t","key":"k","name":"a","op":"put","revision":"x"}`, msg.ErrMalformed},
		{"too large", `{"schema":"weft.change.v1","x":"` + strings.Repeat("a", msg.MaxPayload) + `"}`, msg.ErrTooLarge},
		{"unknown field is fine", `{"schema":"weft.change.v1","source":"m","type":"t","key":"k","name":"a","op":"put","revision":1,"later":true}`, nil},
		// JSON keeps the last of two equal keys: the schema read is that one.
		{"schema again later", `{"schema":"weft.change.v1","source":"m","type":"t","key":"k","name":"a","op":"put","revision":1,"schema":"weft.render.v1"}`, msg.ErrMalformed},
		{"schema again later, same", `{"schema":"weft.render.v1","source":"m","type":"t","key":"k","name":"a","op":"put","revision":1,"schema":"weft.change.v1"}`, nil},
		{"escaped schema", `{"schema":"weft.change\u002ev1","source":"m","type":"t","key":"k","name":"a","op":"put","revision":1}`, nil},
		{"a value naming schema", `{"schema":"weft.change.v1","source":"m","type":"t","key":"\"schema\"","name":"a","op":"put","revision":1}`, nil},
		{"garbage after the schema", `{"schema":"weft.change.v1"x,"source":"m"}`, msg.ErrMalformed},
		{"not closed", `{"schema":"weft.change.v1`, msg.ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c msg.Change
			err := msg.Decode([]byte(tc.data), &c)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !msg.IsPermanent(err) {
				t.Fatalf("decode error %v is not permanent", err)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := msg.NewBundle("t", "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte("a a\n")},
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("global\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []msg.Message{
		&msg.Change{Source: "m", Type: "t", Key: "k", Op: msg.OpDelete, Name: "n", Revision: 9, ObservedAt: at},
		&msg.Sync{Source: "m", Type: "t", Count: 3, At: at},
		&msg.Render{Target: "t", Version: 2, BundleHash: b.Hash, Files: b.Refs(), At: at},
		&msg.Render{Target: "t", Version: 3, Failure: &msg.TemplateError{Template: "haproxy.cfg", Line: 3, Message: "boom"}},
		&msg.ValidateRequest{Target: "t", Version: 1, BundleHash: "h"},
		&msg.ValidateReply{Kind: "haproxy", OK: false, Problems: []msg.Problem{{File: "haproxy.cfg", Line: 2, Message: "x"}}},
		&msg.Validated{Target: "t", BundleHash: "h", OK: false, Reason: "haproxy refused", Missing: []string{"policy"}},
		&msg.DeployOrder{Target: "t", Instance: "local", BundleHash: "h"},
		&msg.Deployed{Target: "t", Instance: "local", Outcome: msg.OutcomeApplied},
		&msg.Trigger{Reason: "manual"},
		&msg.DeadLetter{Service: "renderer", Subject: "weft.change.m.t", Reason: "bad", Payload: []byte{0, 1}},
		&b,
	}
	for _, m := range cases {
		t.Run(m.Schema(), func(t *testing.T) {
			data, err := msg.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(data), `{"schema":"`+m.Schema()+`"`) {
				t.Fatalf("schema not first: %s", data)
			}
			if n, v, err := msg.ParseSchema(m.Schema()); err != nil || v != 1 || n == "" {
				t.Fatalf("ParseSchema(%q) = %q %d %v", m.Schema(), n, v, err)
			}
		})
	}
	data, err := msg.EncodeBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := msg.DecodeBundle(data)
	if err != nil || got.Hash != b.Hash || len(got.Files) != 2 || got.Files[0].Path != "haproxy.cfg" {
		t.Fatalf("bundle round trip: %+v %v", got, err)
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	if _, err := msg.Encode(msg.Render{Target: "t", Version: 1}); !errors.Is(err, msg.ErrInvalid) {
		t.Fatalf("render with neither bundle nor failure: %v", err)
	}
}

func TestBundleConsistent(t *testing.T) {
	ok, err := msg.NewBundle("t", "/b", "a.cfg", []msg.BundleFile{{Path: "a.cfg", Kind: msg.FileConfig, Content: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(f func(*msg.Bundle)) msg.Bundle {
		b := ok
		b.Files = append([]msg.BundleFile(nil), ok.Files...)
		f(&b)
		return b
	}
	cases := []struct {
		name string
		b    msg.Bundle
	}{
		{"content changed", tamper(func(b *msg.Bundle) { b.Files[0].Content = []byte("y") })},
		{"main missing", tamper(func(b *msg.Bundle) { b.Main = "other.cfg" })},
		{"unsafe path", tamper(func(b *msg.Bundle) { b.Files[0].Path = "../a.cfg" })},
		{"absolute path", tamper(func(b *msg.Bundle) { b.Files[0].Path = "/a.cfg" })},
		{"unknown kind", tamper(func(b *msg.Bundle) { b.Files[0].Kind = "exe" })},
		{"relative base", tamper(func(b *msg.Bundle) { b.Base = "rel" })},
		{"duplicate", tamper(func(b *msg.Bundle) { b.Files = append(b.Files, b.Files[0]) })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.b.Consistent(); !errors.Is(err, msg.ErrInvalid) {
				t.Fatalf("Consistent() = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDecodeTriggerEmpty(t *testing.T) {
	if _, err := msg.DecodeTrigger(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := msg.DecodeTrigger([]byte("{not json")); !errors.Is(err, msg.ErrMalformed) {
		t.Fatalf("got %v", err)
	}
}
