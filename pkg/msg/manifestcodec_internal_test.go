package msg

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// marshalManifest is the reference: the envelope as json.MarshalIndent
// writes it.
func marshalManifest(t testing.TB, m BundleManifest) []byte {
	t.Helper()
	b, err := json.MarshalIndent(struct {
		Schema string         `json:"schema"`
		Body   BundleManifest `json:"body"`
	}{m.Schema(), m}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chunkRef(i int) string { return fmt.Sprintf("%064x", i) }

// manifestCases are manifests of every shape the codec meets: no files,
// nil and empty lists, strings encoding/json escapes (which the parser
// declines), and a large one.
func manifestCases() map[string]BundleManifest {
	big := BundleManifest{Target: "edge", Base: "/etc/haproxy", Main: "haproxy.cfg", Hash: chunkRef(7)}
	for f := range 90 {
		mf := ManifestFile{Path: fmt.Sprintf("certs/c-%d.pem", f), Kind: "cert", Name: fmt.Sprint(f), Size: 1000 * f}
		for c := range f * 30 {
			mf.Chunks = append(mf.Chunks, chunkRef(f*1000+c))
		}
		big.Files = append(big.Files, mf)
	}
	return map[string]BundleManifest{
		"nil files":          {Target: "t", Hash: chunkRef(1)},
		"no files":           {Target: "t", Hash: chunkRef(1), Files: []ManifestFile{}},
		"a file, nil chunks": {Target: "t", Hash: chunkRef(1), Files: []ManifestFile{{Path: "a"}}},
		"a file, no chunks":  {Target: "t", Hash: chunkRef(1), Files: []ManifestFile{{Path: "a", Chunks: []string{}}}},
		"one chunk":          {Target: "t", Main: "haproxy.cfg", Hash: chunkRef(1), Files: []ManifestFile{{Path: "haproxy.cfg", Kind: "config", Size: 12, Chunks: []string{chunkRef(2)}}}},
		"escaped strings":    {Target: `quote " and \ back`, Base: "<&>", Main: "tab\there", Hash: chunkRef(1), Files: []ManifestFile{{Path: "é/ü", Name: "\u2028", Chunks: []string{chunkRef(3)}}}},
		"large":              big,
	}
}

// TestManifestCodecIsMarshalIndent: the encoder writes json.MarshalIndent's
// bytes, and the decoder reads them back to the same manifest, or declines
// (escaped strings) and decodeManifest reads them through encoding/json.
func TestManifestCodecIsMarshalIndent(t *testing.T) {
	t.Parallel()
	for name, m := range manifestCases() {
		t.Run(name, func(t *testing.T) {
			want := marshalManifest(t, m)
			got := appendManifest(nil, m)
			if string(got) != string(want) {
				t.Fatalf("appendManifest wrote\n%s\nMarshalIndent\n%s", got, want)
			}
			parsed, schema, ok := parseManifest(got)
			escaped := strings.ContainsAny(string(want), `\`) || strings.ContainsFunc(string(want), func(r rune) bool { return r >= 0x80 })
			switch {
			case ok && escaped:
				t.Fatal("parseManifest read escaped strings")
			case !ok && !escaped:
				t.Fatal("parseManifest declined what appendManifest wrote")
			case ok && (schema != SchemaBundleManifest || !reflect.DeepEqual(parsed, m)):
				t.Fatalf("parseManifest = %+v (%s), want %+v", parsed, schema, m)
			}
			var viaDecode, viaJSON BundleManifest
			derr := decodeManifest(got, &viaDecode)
			jerr := decodeIndented(got, &viaJSON)
			if (derr == nil) != (jerr == nil) || !reflect.DeepEqual(viaDecode, viaJSON) {
				t.Fatalf("decodeManifest = %+v, %v; encoding/json %+v, %v", viaDecode, derr, viaJSON, jerr)
			}
		})
	}
}

// TestDecodeManifestAsEncodingJSON: whatever the bytes (another spacing,
// key order or case, unknown fields, truncations, random edits),
// decodeManifest's answer is encoding/json's.
func TestDecodeManifestAsEncodingJSON(t *testing.T) {
	t.Parallel()
	base := string(appendManifest(nil, manifestCases()["one chunk"]))
	inputs := []string{
		base,
		strings.ReplaceAll(base, "\n", "\n  "),
		strings.ReplaceAll(base, `"kind"`, `"Kind"`),
		strings.Replace(base, `"size": 12`, `"size": 12, "extra": 1`, 1),
		strings.Replace(base, `"size": 12`, `"size": 012`, 1),
		strings.Replace(base, `"size": 12`, `"size": 1e1`, 1),
		strings.Replace(base, `"schema": "weft.bundlemanifest.v1"`, `"schema": "weft.bundlemanifest.v9"`, 1),
		strings.Replace(base, chunkRef(2), "not-a-hash", 1),
		base + " ",
		"",
		"null",
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		b := []byte(base)
		switch r.IntN(3) {
		case 0:
			b = b[:r.IntN(len(b))]
		case 1:
			b[r.IntN(len(b))] = byte(r.IntN(128))
		default:
			i := r.IntN(len(b))
			b = append(b[:i:i], append([]byte{"\n ,:\"[]{}"[r.IntN(9)]}, b[i:]...)...)
		}
		inputs = append(inputs, string(b))
	}
	for i, in := range inputs {
		var got, want BundleManifest
		gerr := decodeManifest([]byte(in), &got)
		werr := decodeIndented([]byte(in), &want)
		if (gerr == nil) != (werr == nil) || (gerr == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("input %d %q: decodeManifest %+v, %v; encoding/json %+v, %v", i, in, got, gerr, want, werr)
		}
	}
}

func BenchmarkManifestCodec(b *testing.B) {
	m := manifestCases()["large"]
	data := appendManifest(nil, m)
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			_ = appendManifest(nil, m)
		}
	})
	b.Run("encode-encoding-json", func(b *testing.B) {
		for b.Loop() {
			_ = marshalManifest(b, m)
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var got BundleManifest
			if err := decodeManifest(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-encoding-json", func(b *testing.B) {
		for b.Loop() {
			var got BundleManifest
			if err := decodeIndented(data, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
}
