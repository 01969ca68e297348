package index

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// reference is Decode as encoding/json reads it: one JSON value and
// nothing but space after it, decoded with UseNumber into a map, then
// Normalize.
func reference(data []byte) (map[string]any, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("invalid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not an object")
	}
	return Normalize(m).(map[string]any), nil
}

// agree fails t when Decode and encoding/json differ on data: one refuses
// what the other reads, or they read different trees.
func agree(t *testing.T, data []byte) {
	t.Helper()
	want, werr := reference(data)
	got, err := Decode(data)
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: Decode err = %v, encoding/json err = %v", data, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: Decode = %#v, encoding/json = %#v", data, got, want)
	}
}

var decodeSeeds = []string{
	`{}`, ` {} `, "\t{\n}\r\n", `{"a":1}`, `{"a":1,"a":{"b":2}}`, `{"a":{"b":1},"a":3}`,
	`{"n":[0,-0,1,-1,12,1.5,-2.5e3,1E2,1e-2,0.0,1.0,123456789012345678,1234567890123456789,12345678901234567890,-9223372036854775808,-9223372036854775809,9223372036854775807,9223372036854775808,1e400,-1e400,4.9e-324,1e-400]}`,
	`{"s":["","a","\"","\\","\/","\b\f\n\r\t","\u0041","\u00e9","\u20ac","\ud83d\ude00","\ud83d","\ude00","\ud83dx","\ud83d\u0041","\ud83d\ud83d\ude00","é","€","😀"]}`,
	"{\"bad utf8\":\"\xff\xfe\",\"cut\":\"\xe2\x82\",\"surrogate\":\"\xed\xa0\x80\",\"k\xff\":1}",
	`{"lit":[true,false,null]}`, `{"deep":[[[[{"a":[{}]}]]]]}`,
	`[1]`, `null`, `"x"`, `1`, `true`, ``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":1 "b":2}`,
	`{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1e+}`, `{"a":+1}`,
	`{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", `{"a":"`, `{"a":"\`,
	`{} {}`, `{}}`, `{}]`, `{} x`, `{}` + "\x00", `{"a":1}/`, `{'a':1}`, `{a:1}`,
	`{"a":NaN}`, `{"a":Infinity}`, "{\"a\":\"\x7f\"}",
}

func TestDecodeAsEncodingJSON(t *testing.T) {
	for _, s := range decodeSeeds {
		agree(t, []byte(s))
	}
	deep := func(n int, open, close string) []byte {
		return []byte(`{"x":` + strings.Repeat(open, n) + strings.Repeat(close, n) + `}`)
	}
	for _, n := range []int{maxDepth - 2, maxDepth - 1, maxDepth, maxDepth + 1} {
		agree(t, deep(n, "[", "]"))
		agree(t, deep(n, `{"a":`, "}"))
	}
}

// TestDecodeAsEncodingJSONOnEdits: 20,000 random edits of valid objects
// (bytes inserted, removed and replaced, cuts), read as encoding/json
// reads them.
func TestDecodeAsEncodingJSONOnEdits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []byte("{}[]:,\"\\/ \t\n0123456789-+.eEtrufalsn\xff\xe2\x82\xacuabcdef")
	bases := [][]byte{
		[]byte(`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s1-1","labels":{"kubernetes.io/service-name":"s1"}},"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true}}],"ports":[{"name":"http","port":8080}]}`),
		[]byte(`{"a":[1,-2.5,3e2,"x\"y\u00e9\ud83d\ude00",null,true,false,{"b":{}}],"c":""}`),
	}
	for range 20000 {
		b := bytes.Clone(bases[rng.IntN(len(bases))])
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(b) + 1)
			switch rng.IntN(4) {
			case 0:
				b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
			case 1:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			case 2:
				if i < len(b) {
					b[i] = alphabet[rng.IntN(len(alphabet))]
				}
			case 3:
				b = b[:i]
			}
		}
		agree(t, b)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { agree(t, data) })
}

// BenchmarkDecode reads one EndpointSlice as the watcher writes it, beside
// encoding/json (UseNumber, then Normalize) in the same run.
func BenchmarkDecode(b *testing.B) {
	data := []byte(`{"addressType":"IPv4","apiVersion":"discovery.k8s.io/v1","endpoints":[{"addresses":["10.1.2.3"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"node-a","targetRef":{"kind":"Pod","name":"web-5d8f9c-abcde","namespace":"shop","uid":"6f1c2a9e-3b7d-4c1e-9f2a-1b2c3d4e5f60"}}],"kind":"EndpointSlice","metadata":{"generateName":"web-","labels":{"endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io","kubernetes.io/service-name":"web"},"name":"web-x7k2p","namespace":"shop","resourceVersion":"123456","uid":"0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"},"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}`)
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
