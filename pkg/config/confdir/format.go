package confdir

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"

	"github.com/BurntSushi/toml"
	"sigs.k8s.io/yaml"
)

// ErrFormat matches every output that does not have the syntax its
// resource's output_format names.
var ErrFormat = errors.New("output does not match output_format")

// CheckFormat reports whether content has the syntax of format (one of
// OutputFormats; "" accepts anything). The error wraps ErrFormat and the
// parser's own error.
func CheckFormat(format string, content []byte) error {
	var err error
	switch format {
	case "":
		return nil
	case "json":
		if !json.Valid(content) {
			var v any
			err = json.Unmarshal(content, &v)
		}
	case "toml":
		var v map[string]any
		err = toml.Unmarshal(content, &v)
	case "yaml", "yml":
		var v any
		err = yaml.Unmarshal(content, &v)
	case "xml":
		err = checkXML(content)
	default:
		return fmt.Errorf("%w: unknown format %q", ErrFormat, format)
	}
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrFormat, format, err)
	}
	return nil
}

// checkXML reads every token: the content must be well-formed XML with one
// root element.
func checkXML(content []byte) error {
	d := xml.NewDecoder(bytes.NewReader(content))
	roots, depth := 0, 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 {
		return fmt.Errorf("want one root element, got %d", roots)
	}
	return nil
}
