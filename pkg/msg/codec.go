package msg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MaxPayload is the largest message payload weft writes or reads. Large
// content (rendered bundles) goes to the object store; messages carry hashes.
const MaxPayload = 1 << 20

// Message is implemented by every message type.
type Message interface {
	// Schema returns the type's schema string, "weft.<name>.v<major>".
	Schema() string
	// Validate checks required fields after decoding and before encoding.
	Validate() error
}

// MaxBundle is the largest stored bundle (object store, not a message).
const MaxBundle = 256 << 20

// Encode validates m and encodes it as JSON with its schema field set.
func Encode[T Message](m T) ([]byte, error) { return encode(m, MaxPayload) }

// Decode decodes data into m, checking size, schema name and major version,
// and then m.Validate. Errors wrap ErrTooLarge, ErrMalformed,
// ErrUnknownVersion or ErrInvalid, all permanent.
func Decode[T Message](data []byte, m T) error { return decode(data, m, MaxPayload) }

// EncodeBundle encodes a bundle for the object store.
func EncodeBundle(b Bundle) ([]byte, error) { return encode(b, MaxBundle) }

// DecodeBundle decodes a bundle read from the object store and checks that
// it is consistent (its hash matches its content).
func DecodeBundle(data []byte) (Bundle, error) {
	var b Bundle
	err := decode(data, &b, MaxBundle)
	return b, err
}

func encode[T Message](m T, limit int) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.Schema(), err)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.Schema(), err)
	}
	// Prepend the schema so that a person reading `nats sub` sees it first.
	var b bytes.Buffer
	b.Grow(len(body) + 48)
	b.WriteString(`{"schema":`)
	s, _ := json.Marshal(m.Schema())
	b.Write(s)
	if len(body) > 2 {
		b.WriteByte(',')
		b.Write(body[1:])
	} else {
		b.WriteByte('}')
	}
	if b.Len() > limit {
		return nil, fmt.Errorf("encode %s: %w: %d bytes > %d", m.Schema(), ErrTooLarge, b.Len(), limit)
	}
	return b.Bytes(), nil
}

type envelope struct {
	Schema string `json:"schema"`
}

func decode[T Message](data []byte, m T, limit int) error {
	want := m.Schema()
	if len(data) > limit {
		return fmt.Errorf("decode %s: %w: %d bytes > %d", want, ErrTooLarge, len(data), limit)
	}
	schema, ok := leadingSchema(data)
	if !ok {
		var env envelope
		if err := json.Unmarshal(data, &env); err != nil {
			return fmt.Errorf("decode %s: %w: %v", want, ErrMalformed, err)
		}
		schema = env.Schema
	}
	if err := checkSchema(schema, want); err != nil {
		return fmt.Errorf("decode %s: %w", want, err)
	}
	if err := json.Unmarshal(data, m); err != nil {
		return fmt.Errorf("decode %s: %w: %v", want, ErrMalformed, err)
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("decode %s: %w", want, err)
	}
	return nil
}

// schemaKey opens every message encode writes.
const schemaKey = `{"schema":"`

// leadingSchema reads the schema of a message as encode writes it (the
// schema's key first, its value without escapes, the key nowhere else),
// so that decoding parses the JSON once; ok is false for anything else,
// which is then read by a full parse of the envelope.
func leadingSchema(data []byte) (schema string, ok bool) {
	rest, found := bytes.CutPrefix(data, []byte(schemaKey))
	if !found {
		return "", false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || bytes.IndexByte(rest[:end], '\\') >= 0 || bytes.Contains(rest[end:], []byte(`"schema"`)) {
		return "", false
	}
	return string(rest[:end]), true
}

// ParseSchema splits "weft.<name>.v<major>" into name and major version.
func ParseSchema(s string) (name string, major int, err error) {
	rest, ok := strings.CutPrefix(s, Root+".")
	i := strings.LastIndex(rest, ".v")
	if !ok || i <= 0 {
		return "", 0, fmt.Errorf("%w: schema %q is not weft.<name>.v<major>", ErrMalformed, s)
	}
	major, err = strconv.Atoi(rest[i+2:])
	if err != nil || major < 1 {
		return "", 0, fmt.Errorf("%w: schema %q has no valid major version", ErrMalformed, s)
	}
	return rest[:i], major, nil
}

func checkSchema(got, want string) error {
	if got == "" {
		return fmt.Errorf("%w: no schema field", ErrMalformed)
	}
	gn, gv, err := ParseSchema(got)
	if err != nil {
		return err
	}
	wn, wv, err := ParseSchema(want)
	if err != nil {
		return err
	}
	if gn != wn {
		return fmt.Errorf("%w: schema %q where %q was expected", ErrMalformed, got, want)
	}
	if gv != wv {
		return fmt.Errorf("%w: %q (this build reads v%d)", ErrUnknownVersion, got, wv)
	}
	return nil
}
