package config

import "time"

// GatewayStatus makes weft write the status a gateway-library target
// renders (its bundle's files/gateway-status.json) to the GatewayClasses,
// Gateways and HTTPRoutes it serves, and the HAProxy fleet's addresses to
// each Gateway's status.addresses (the watcher does, one replica at a
// time):
//
//	targets:
//	  gateway:
//	    library: gateway
//	    gateway_status:
//	      from: {service: weft-system/weft-haproxy}  # or {pods: {...}} or {addresses: [...]}; optional
type GatewayStatus struct {
	// Source names the kubernetes source whose API server holds the
	// Gateway API objects (default: the only kubernetes source).
	Source string `json:"source,omitempty"`
	// ControllerName is the controller whose HTTPRoute status.parents
	// entries are written (default: library_options.controller_name, else
	// DefaultGatewayController).
	ControllerName string `json:"controller_name,omitempty"`
	// From is where the Gateways' status.addresses come from, as for
	// ingress_status; nil: addresses are not written.
	From *IngressStatusFrom `json:"from,omitempty"`
	// Resync is how often the status is written again without a new
	// bundle, setting back what was changed behind weft's back (default
	// 5m).
	Resync Duration `json:"resync,omitempty"`
}

// Defaults of gateway_status.
const (
	DefaultGatewayController   = "weft.io/gateway-controller"
	DefaultGatewayStatusResync = 5 * time.Minute
)

// gatewayStatusDefaults fills the defaults of t's gateway_status.
func (c *Config) gatewayStatusDefaults(t *Target) {
	if t.GatewayStatus == nil {
		return
	}
	s := *t.GatewayStatus
	if s.ControllerName == "" {
		s.ControllerName = t.LibraryOptions["controller_name"]
	}
	if s.ControllerName == "" {
		s.ControllerName = DefaultGatewayController
	}
	if s.Source == "" {
		s.Source = c.onlyKubernetesSource()
	}
	if s.Resync == 0 {
		s.Resync = Duration(DefaultGatewayStatusResync)
	}
	if s.From != nil && s.From.Pods != nil && s.From.Pods.Address == "" {
		f := *s.From
		p := *f.Pods
		p.Address = PodHostIP
		f.Pods = &p
		s.From = &f
	}
	t.GatewayStatus = &s
}

// checkGatewayStatus reports the problems of target name's gateway_status;
// controllers maps each source and controller name to the first target
// writing it (two would undo each other's route parents).
func (c *Config) checkGatewayStatus(ps *problems, name string, t Target, controllers map[string]string) {
	s := t.GatewayStatus
	if s == nil {
		return
	}
	f := path{"targets", name, "gateway_status"}
	c.checkStatusSource(ps, f.k("source"), s.Source, "Gateway API objects")
	key := s.Source + " " + s.ControllerName
	if other, ok := controllers[key]; ok {
		ps.add(f.k("controller_name"), "controller %q is written by target %q too: one target writes a controller's status", s.ControllerName, other)
	} else {
		controllers[key] = name
	}
	if s.Resync < 0 {
		ps.add(f.k("resync"), "must not be negative")
	}
	if s.From != nil {
		checkStatusFrom(ps, f.k("from"), *s.From)
	}
}
