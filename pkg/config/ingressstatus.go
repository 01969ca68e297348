package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// IngressStatus makes weft write the addresses of a target's HAProxy
// fleet to status.loadBalancer.ingress of every Ingress of the target's
// IngressClass (the watcher does, one replica at a time):
//
//	targets:
//	  edge:
//	    library: ingress
//	    ingress_status:
//	      class: weft                                # default: library_options.ingress_class, else "weft"
//	      from: {service: weft-system/weft-haproxy}   # or {pods: {...}} or {addresses: [...]}
type IngressStatus struct {
	// Source names the kubernetes source whose API server holds the
	// Ingresses (default: the only kubernetes source).
	Source string `json:"source,omitempty"`
	// Class is the IngressClass the target serves: an Ingress whose
	// spec.ingressClassName, or without one its annotation
	// kubernetes.io/ingress.class, names it.
	Class string `json:"class,omitempty"`
	// Controller is the target's controller name (default:
	// library_options.controller, else DefaultIngressController): every
	// IngressClass whose spec.controller it is is the target's too.
	Controller string `json:"controller,omitempty"`
	// DefaultClass claims the Ingresses that name no class at all (the
	// target's class is the cluster's default IngressClass).
	DefaultClass bool `json:"default_class,omitempty"`
	// From is where the addresses come from: exactly one of its fields.
	From IngressStatusFrom `json:"from"`
	// Resync is how often every Ingress is looked at again without a
	// change (default 5m).
	Resync Duration `json:"resync,omitempty"`
}

// IngressStatusFrom is where a target's published addresses come from.
type IngressStatusFrom struct {
	// Service is "<namespace>/<name>" of a Service of type LoadBalancer:
	// its status.loadBalancer.ingress (IPs and hostnames).
	Service string `json:"service,omitempty"`
	// Pods are the instance Pods: their host or pod IPs.
	Pods *IngressStatusPods `json:"pods,omitempty"`
	// Addresses are fixed IPs or DNS names.
	Addresses []string `json:"addresses,omitempty"`
}

// IngressStatusPods selects the instance Pods whose addresses are
// published: running Pods, ready or not, that have the address.
type IngressStatusPods struct {
	Namespace string `json:"namespace"`
	Selector  string `json:"selector"`
	// Address is host_ip (default: the node's address, for Pods on
	// hostNetwork or with host ports) or pod_ip.
	Address string `json:"address,omitempty"`
}

// Addresses of instance Pods (IngressStatusPods.Address).
const (
	PodHostIP = "host_ip"
	PodPodIP  = "pod_ip"
)

// Defaults of ingress_status.
const (
	DefaultIngressClass        = "weft"
	DefaultIngressController   = "weft.io/ingress"
	DefaultIngressStatusResync = 5 * time.Minute
)

// ServiceName splits From.Service into namespace and name.
func (f IngressStatusFrom) ServiceName() (namespace, name string) {
	namespace, name, _ = strings.Cut(f.Service, "/")
	return namespace, name
}

// ingressStatusDefaults fills the defaults of t's ingress_status.
func (c *Config) ingressStatusDefaults(t *Target) {
	if t.IngressStatus == nil {
		return
	}
	s := *t.IngressStatus
	if s.Class == "" {
		s.Class = t.LibraryOptions["ingress_class"]
	}
	if s.Class == "" {
		s.Class = DefaultIngressClass
	}
	if s.Controller == "" {
		s.Controller = t.LibraryOptions["controller"]
	}
	if s.Controller == "" {
		s.Controller = DefaultIngressController
	}
	if s.Source == "" {
		s.Source = c.onlyKubernetesSource()
	}
	if s.Resync == 0 {
		s.Resync = Duration(DefaultIngressStatusResync)
	}
	if p := s.From.Pods; p != nil && p.Address == "" {
		q := *p
		q.Address = PodHostIP
		s.From.Pods = &q
	}
	t.IngressStatus = &s
}

// checkIngressStatus reports the problems of target name's ingress_status;
// classes maps each class to the first target claiming it (two targets
// claiming one class would overwrite each other's addresses).
func (c *Config) checkIngressStatus(ps *problems, name string, t Target, classes map[string]string) {
	s := t.IngressStatus
	if s == nil {
		return
	}
	f := path{"targets", name, "ingress_status"}
	c.checkStatusSource(ps, f.k("source"), s.Source, "Ingresses")
	if len(validation.IsDNS1123Subdomain(s.Class)) > 0 {
		ps.add(f.k("class"), "%q is not an IngressClass name (a lowercase DNS subdomain)", s.Class)
	} else if other, ok := classes[s.Class]; ok {
		ps.add(f.k("class"), "class %q is claimed by target %q too: one target writes a class's addresses", s.Class, other)
	} else {
		classes[s.Class] = name
	}
	if s.DefaultClass {
		const classless = "" // the key of the Ingresses without a class
		if other, ok := classes[classless]; ok {
			ps.add(f.k("default_class"), "the Ingresses without a class are claimed by target %q too", other)
		} else {
			classes[classless] = name
		}
	}
	if s.Resync < 0 {
		ps.add(f.k("resync"), "must not be negative")
	}
	checkStatusFrom(ps, f.k("from"), s.From)
}

// onlyKubernetesSource is the name of the only kubernetes source, "" when
// there is not exactly one.
func (c *Config) onlyKubernetesSource() string {
	var kube []string
	for _, src := range c.Sources {
		if src.Type == SourceKubernetes {
			kube = append(kube, src.Name)
		}
	}
	if len(kube) == 1 {
		return kube[0]
	}
	return ""
}

// checkStatusSource reports a status writer's source that is not a
// kubernetes source; what names the objects it writes.
func (c *Config) checkStatusSource(ps *problems, p path, source, what string) {
	switch i := c.sourceIndex(source); {
	case source == "":
		ps.add(p, "required: the kubernetes source whose API server holds the %s (there is not exactly one)", what)
	case i < 0:
		ps.add(p, "%q is not a source", source)
	case c.Sources[i].Type != SourceKubernetes:
		ps.add(p, "%q is a %s source, not a kubernetes source", source, c.Sources[i].Type)
	}
}

// checkStatusFrom reports the problems of a status writer's from.
func checkStatusFrom(ps *problems, from path, f IngressStatusFrom) {
	set := 0
	if f.Service != "" {
		set++
		ns, n := f.ServiceName()
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Label(n)) > 0 || strings.Count(f.Service, "/") != 1 {
			ps.add(from.k("service"), "must be <namespace>/<name> of a Service, got %q", f.Service)
		}
	}
	if p := f.Pods; p != nil {
		set++
		pf := from.k("pods")
		if len(validation.IsDNS1123Label(p.Namespace)) > 0 {
			ps.add(pf.k("namespace"), "required: the namespace of the instance Pods, got %q", p.Namespace)
		}
		if sel, err := labels.Parse(p.Selector); err != nil {
			ps.add(pf.k("selector"), "%v", err)
		} else if sel.Empty() {
			ps.add(pf.k("selector"), "required: a label selector of the instance Pods")
		}
		if p.Address != PodHostIP && p.Address != PodPodIP {
			ps.add(pf.k("address"), "must be %s or %s, got %q", PodHostIP, PodPodIP, p.Address)
		}
	}
	if f.Addresses != nil {
		set++
		if len(f.Addresses) == 0 {
			ps.add(from.k("addresses"), "required: at least one IP or DNS name")
		}
		for i, a := range f.Addresses {
			if err := checkAddress(a); err != nil {
				ps.add(from.k("addresses").i(i), "%v", err)
			}
		}
	}
	if set != 1 {
		ps.add(from, "exactly one of service, pods and addresses is required, got %d", set)
	}
}

// checkAddress accepts an IP or a DNS name, as status.loadBalancer takes.
func checkAddress(a string) error {
	if _, err := netip.ParseAddr(a); err == nil {
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(a); len(errs) > 0 {
		return fmt.Errorf("%q is neither an IP nor a DNS name", a)
	}
	return nil
}
