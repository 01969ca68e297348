package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// site is one application of the manifests folder: an Ingress, a Service
// and an EndpointSlice, each in a file of its own so that an edit touches
// one object.
type site struct {
	n        int
	class    string   // ingressClassName: "weft", or another class weft ignores
	paths    []string // of the Ingress, each "<pathType> <path>"
	addrs    []string // of the EndpointSlice
	port     int      // the Service's port
	present  bool     // the site's files exist
	noSlices bool     // the EndpointSlice is deleted
}

// manifests writes and edits a folder of sites. Writes are atomic (a
// temporary file renamed into place) so the watcher never reads half a file.
type manifests struct {
	dir, tmp string
	rng      *rand.Rand
	log      *os.File // every edit, with its time
	sites    []*site
}

func newManifests(dir, tmp string, sites int, rng *rand.Rand) (*manifests, error) {
	m := &manifests{dir: dir, tmp: tmp, rng: rng}
	for _, d := range []string{dir, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var err error
	if m.log, err = os.Create(filepath.Join(filepath.Dir(dir), "edits.log")); err != nil {
		return nil, err
	}
	for i := range sites {
		s := &site{n: i, class: "weft", paths: []string{"Prefix /", "Prefix /api"}, port: 80, present: true}
		s.addrs = m.addresses()
		m.sites = append(m.sites, s)
		if err := m.writeSite(s); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// objects is the number of objects in the folder.
func (m *manifests) objects() int {
	var n int
	for _, s := range m.sites {
		if s.present {
			n += 3
			if s.noSlices {
				n--
			}
		}
	}
	return n
}

func (m *manifests) addresses() []string {
	addrs := make([]string, 1+m.rng.IntN(3))
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d", m.rng.IntN(256), m.rng.IntN(256), 1+m.rng.IntN(254))
	}
	return addrs
}

// edit makes one random change, logs it to edits.log and returns what it
// did.
func (m *manifests) edit() (string, error) {
	what, err := m.change()
	fmt.Fprintf(m.log, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), what)
	return what, err
}

func (m *manifests) change() (string, error) {
	s := m.sites[m.rng.IntN(len(m.sites))]
	if !s.present {
		s.present, s.noSlices, s.addrs = true, false, m.addresses()
		return fmt.Sprintf("site %d re-created", s.n), m.writeSite(s)
	}
	switch r := m.rng.IntN(100); {
	case r < 50:
		s.addrs = m.addresses()
		s.noSlices = false
		return fmt.Sprintf("site %d endpoints %v", s.n, s.addrs), m.write(s.file("endpoints"), s.endpoints())
	case r < 70:
		p := fmt.Sprintf("/p%d", m.rng.IntN(5))
		kind := []string{"Prefix", "Exact"}[m.rng.IntN(2)]
		s.paths = toggle(s.paths, kind+" "+p)
		return fmt.Sprintf("site %d paths %v", s.n, s.paths), m.write(s.file("ingress"), s.ingress())
	case r < 78:
		s.port = 80 + 8000*m.rng.IntN(2)
		return fmt.Sprintf("site %d port %d", s.n, s.port), m.write(s.file("service"), s.service())
	case r < 86:
		if s.class == "weft" {
			s.class = "other"
		} else {
			s.class = "weft"
		}
		return fmt.Sprintf("site %d class %s", s.n, s.class), m.write(s.file("ingress"), s.ingress())
	case r < 93:
		if s.noSlices {
			s.noSlices = false
			return fmt.Sprintf("site %d endpoints back", s.n), m.write(s.file("endpoints"), s.endpoints())
		}
		s.noSlices = true
		return fmt.Sprintf("site %d endpoints deleted", s.n), os.Remove(filepath.Join(m.dir, s.file("endpoints")))
	default:
		s.present = false
		for _, kind := range []string{"ingress", "service", "endpoints"} {
			if err := os.Remove(filepath.Join(m.dir, s.file(kind))); err != nil && !os.IsNotExist(err) {
				return "", err
			}
		}
		return fmt.Sprintf("site %d deleted", s.n), nil
	}
}

func toggle(list []string, v string) []string {
	for i, x := range list {
		if x == v {
			return append(list[:i:i], list[i+1:]...)
		}
	}
	return append(list, v)
}

func (m *manifests) writeSite(s *site) error {
	if err := m.write(s.file("ingress"), s.ingress()); err != nil {
		return err
	}
	if err := m.write(s.file("service"), s.service()); err != nil {
		return err
	}
	if s.noSlices {
		return nil
	}
	return m.write(s.file("endpoints"), s.endpoints())
}

func (m *manifests) write(name, content string) error {
	f, err := os.CreateTemp(m.tmp, name)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(m.dir, name))
}

func (s *site) file(kind string) string { return fmt.Sprintf("site-%03d-%s.yaml", s.n, kind) }

func (s *site) name() string { return fmt.Sprintf("site-%03d", s.n) }

func (s *site) ingress() string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: %s
  namespace: chaos
spec:
  ingressClassName: %s
  rules:
    - host: %s.example.com
      http:
        paths:
`, s.name(), s.class, s.name())
	for _, p := range s.paths {
		kind, path, _ := strings.Cut(p, " ")
		fmt.Fprintf(&b, `          - path: %s
            pathType: %s
            backend:
              service:
                name: %s
                port:
                  number: %d
`, path, kind, s.name(), s.port)
	}
	return b.String()
}

func (s *site) service() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: chaos
spec:
  selector:
    app: %s
  ports:
    - name: http
      port: %d
      targetPort: 8080
`, s.name(), s.name(), s.port)
}

func (s *site) endpoints() string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s-slice
  namespace: chaos
  labels:
    kubernetes.io/service-name: %s
addressType: IPv4
ports:
  - name: http
    port: 8080
    protocol: TCP
endpoints:
`, s.name(), s.name())
	for i, a := range s.addrs {
		fmt.Fprintf(&b, `  - addresses: [%q]
    conditions:
      ready: true
    targetRef:
      kind: Pod
      name: %s-%d
`, a, s.name(), i)
	}
	return b.String()
}
