package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// A fragment entry has one main output and any number of named parts:
// `{% part "name" %}...{% endpart %}` in a fragment (or a snippet it
// includes) appends what its body renders to the entry's part of that name
// instead of the main output. fragments("f", "name") joins that part of
// every entry of f in id order, as fragments("f") joins the main outputs,
// so one entry that works out a thing once can feed several outputs. The
// body runs in a child scope, like the body of a Jinja2 call block: names
// it sets are not visible after endpart (a namespace() attribute is).

// partNode is `{% part "name" %}...{% endpart %}`.
type partNode struct {
	location *tokens.Token
	name     string
	wrapper  *nodes.Wrapper
}

func (n *partNode) Position() *tokens.Token { return n.location }
func (n *partNode) String() string          { return fmt.Sprintf("part %q", n.name) }

func partParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	n := &partNode{location: p.Current()}
	name := args.Match(tokens.String)
	if name == nil || !args.End() {
		return nil, args.Error(`part takes one literal name: {% part "name" %}`, args.Current())
	}
	if name.Val == "" {
		return nil, args.Error("a part needs a non-empty name", name)
	}
	n.name = name.Val
	wrapper, endargs, err := p.WrapUntil("endpart")
	if err != nil {
		return nil, err
	}
	if !endargs.End() {
		return nil, endargs.Error("endpart takes no arguments", endargs.Current())
	}
	n.wrapper = wrapper
	return n, nil
}

// errPartOutsideFragment is the error of a part rendered by an output.
var errPartOutsideFragment = errors.New("part can only be used in a fragment (or a snippet a fragment includes)")

func (n *partNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	st := stateOf(r.Environment.Context)
	if st == nil || st.parts == nil {
		return errPartOutsideFragment
	}
	b := st.parts[n.name]
	if b == nil {
		b = &strings.Builder{}
		st.parts[n.name] = b
	}
	sub := scope(r)
	sub.Output = b
	return walk(sub, n.wrapper)
}

// partsOf returns the parts of the rendered entry (nil without any).
func partsOf(builders map[string]*strings.Builder) map[string]string {
	if len(builders) == 0 {
		return nil
	}
	out := make(map[string]string, len(builders))
	for name, b := range builders {
		out[name] = b.String()
	}
	return out
}

// declaredParts returns the part names that text and the snippets it
// includes (by literal name, transitively) declare, and whether every
// include could be followed (an include by expression cannot).
func declaredParts(text string, snippets map[string]string, cfg *config.Config) (map[string]bool, bool) {
	parts := map[string]bool{}
	seen := map[string]bool{}
	complete := true
	var visit func(string)
	visit = func(text string) {
		toks := lexAll(text, cfg)
		for i := 0; i+2 < len(toks); i++ {
			if toks[i].Type != tokens.BlockBegin || toks[i+1].Type != tokens.Name {
				continue
			}
			arg := toks[i+2]
			switch toks[i+1].Val {
			case "part":
				if arg.Type == tokens.String {
					parts[arg.Val] = true
				}
			case "include":
				if arg.Type != tokens.String || (i+3 < len(toks) && toks[i+3].Type != tokens.BlockEnd && toks[i+3].Type != tokens.Name) {
					complete = false
					continue
				}
				if !seen[arg.Val] {
					seen[arg.Val] = true
					visit(snippets[arg.Val])
				}
			}
		}
	}
	visit(text)
	return parts, complete
}

func lexAll(text string, cfg *config.Config) []*tokens.Token {
	stream := tokens.LexAll(text, cfg)
	var toks []*tokens.Token
	for !stream.End() {
		toks = append(toks, stream.Next())
	}
	return toks
}
