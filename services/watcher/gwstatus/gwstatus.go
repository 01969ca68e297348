// Package gwstatus writes the status that the gateway library renders into
// a target's bundle (files/gateway-status.json, see
// pkg/render/library/gateway/README.md) to the Gateway API objects:
// GatewayClass and Gateway status.conditions, Gateway status.listeners,
// and HTTPRoute status.parents.
//
// Contract of Writer.Write:
//   - The status is the render's: Write never computes routing facts
//     itself, so what it writes cannot disagree with the configuration
//     rendered from the same objects.
//   - Each object is read, its status merged and written with
//     UpdateStatus, only when it differs; a conflict reads the object
//     again and retries (client-go's default backoff).
//   - Conditions keep their lastTransitionTime while their status is
//     unchanged; observedGeneration is the generation the render saw.
//   - HTTPRoute status.parents entries of other controllers are kept; the
//     entries of this controller are replaced by the render's, and removed
//     from the routes the render no longer lists.
//   - An object that no longer exists is counted as missing, not written
//     and not an error; any other failure is returned (joined) after every
//     object was tried.
//   - A Gateway's status.addresses are written only when its
//     GatewayStatus.Addresses is not nil (WithAddresses sets them);
//     otherwise they are left as they are.
//
// Contract of Run (weft.yaml: targets.<t>.gateway_status):
//   - One replica writes: the holder of the lease gateway-status.<target>
//     in weft-leases; a replica that stops releases it, one that dies
//     loses it after LeaseTTL, and another takes over, writing at once.
//   - The status written is the served bundle's: the pinned one while a
//     rollback pins the target, else the newest accepted by validation
//     (the validation status's lastGood), so that it describes what
//     HAProxy serves, not a render that may still be refused. It is
//     written when that changes, when the addresses change, and every
//     resync (setting back what was changed behind weft's back).
//   - A failed write, an unreadable bundle or addresses that cannot be read
//     are logged, counted (weft_watcher_gateway_status_writes_total
//     {result="failed"}) and retried with backoff; nothing is written from
//     addresses that gave no answer. A bundle without a usable status file
//     is logged and counted (result="invalid") once, and not retried.
package gwstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// The Gateway API resources written.
var (
	GatewayClasses = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
	Gateways       = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	HTTPRoutes     = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
)

// ErrStatus is matched by the error of Decode for a status file that is
// not the gateway library's.
var ErrStatus = errors.New("gateway status: invalid status file")

// Condition is a condition as the library renders it.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// Status is files/gateway-status.json.
type Status struct {
	GatewayClasses []ClassStatus   `json:"gatewayClasses"`
	Gateways       []GatewayStatus `json:"gateways"`
	HTTPRoutes     []RouteStatus   `json:"httpRoutes"`
}

// ClassStatus is the status of a GatewayClass.
type ClassStatus struct {
	Name       string      `json:"name"`
	Conditions []Condition `json:"conditions"`
}

// GatewayStatus is the status of a Gateway.
type GatewayStatus struct {
	Namespace  string           `json:"namespace"`
	Name       string           `json:"name"`
	Generation int64            `json:"generation"`
	Conditions []Condition      `json:"conditions"`
	Listeners  []ListenerStatus `json:"listeners"`
	// Addresses are the Gateway's status.addresses; nil: not written (the
	// library does not render them; WithAddresses sets them).
	Addresses []Address `json:"addresses,omitempty"`
}

// Address is one entry of a Gateway's status.addresses.
type Address struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// Address types of the Gateway API.
const (
	AddressIP       = "IPAddress"
	AddressHostname = "Hostname"
)

// ReasonAddressNotAssigned is the Programmed reason of a Gateway that has
// no address.
const ReasonAddressNotAssigned = "AddressNotAssigned"

// WithAddresses returns a copy of st whose Gateways have the addresses
// addrs, and whose Programmed condition agrees with them: a Gateway
// without address is not programmed (AddressNotAssigned).
func WithAddresses(st *Status, addrs []Address) *Status {
	out := *st
	out.Gateways = make([]GatewayStatus, len(st.Gateways))
	for i, g := range st.Gateways {
		g.Addresses = append([]Address{}, addrs...)
		conds := make([]Condition, len(g.Conditions))
		copy(conds, g.Conditions)
		for j, c := range conds {
			if c.Type == "Programmed" && c.Status == "True" && len(addrs) == 0 {
				conds[j] = Condition{Type: c.Type, Status: "False", Reason: ReasonAddressNotAssigned}
			}
		}
		g.Conditions = conds
		out.Gateways[i] = g
	}
	return &out
}

// ListenerStatus is the status of one listener of a Gateway.
type ListenerStatus struct {
	Name           string           `json:"name"`
	AttachedRoutes int64            `json:"attachedRoutes"`
	SupportedKinds []map[string]any `json:"supportedKinds"`
	Conditions     []Condition      `json:"conditions"`
}

// RouteStatus is this controller's part of an HTTPRoute's status.
type RouteStatus struct {
	Namespace  string         `json:"namespace"`
	Name       string         `json:"name"`
	Generation int64          `json:"generation"`
	Parents    []ParentStatus `json:"parents"`
}

// ParentStatus is one status.parents entry of an HTTPRoute.
type ParentStatus struct {
	ParentRef      map[string]any `json:"parentRef"`
	ControllerName string         `json:"controllerName"`
	Conditions     []Condition    `json:"conditions"`
}

// Decode reads a gateway-status.json.
func Decode(data []byte) (*Status, error) {
	var st Status
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStatus, err)
	}
	return &st, nil
}

// Result counts what a Write did.
type Result struct {
	Written, Unchanged, Missing int
}

// Writer writes rendered statuses through Client.
type Writer struct {
	Client dynamic.Interface
	// ControllerName is the controller whose HTTPRoute parents entries
	// the writer owns (the library's controller_name).
	ControllerName string
	// Now is the clock of lastTransitionTime (default time.Now).
	Now func() time.Time
}

// Write writes st to the objects it names (see the package contract).
func (w *Writer) Write(ctx context.Context, st *Status) (Result, error) {
	var res Result
	var errs []error
	do := func(gvr schema.GroupVersionResource, ns, name string, mutate func(u *unstructured.Unstructured) error) {
		outcome, err := w.update(ctx, gvr, ns, name, mutate)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %s/%s: %w", gvr.Resource, ns, name, err))
		case outcome == outcomeMissing:
			res.Missing++
		case outcome == outcomeUnchanged:
			res.Unchanged++
		default:
			res.Written++
		}
	}
	now := w.now()
	for _, c := range st.GatewayClasses {
		do(GatewayClasses, "", c.Name, func(u *unstructured.Unstructured) error {
			old, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			return unstructured.SetNestedSlice(u.Object, conditions(old, c.Conditions, u.GetGeneration(), now), "status", "conditions")
		})
	}
	for _, g := range st.Gateways {
		do(Gateways, g.Namespace, g.Name, func(u *unstructured.Unstructured) error {
			return gatewayStatus(u, g, now)
		})
	}
	listed := map[string]bool{}
	for _, r := range st.HTTPRoutes {
		listed[r.Namespace+"/"+r.Name] = true
		do(HTTPRoutes, r.Namespace, r.Name, func(u *unstructured.Unstructured) error {
			return w.routeStatus(u, r, now)
		})
	}
	// Routes the status no longer lists (they left this controller's
	// Gateways) lose this controller's parents entries.
	routes, err := w.Client.Resource(HTTPRoutes).List(ctx, metav1.ListOptions{})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing httproutes: %w", err))
	} else {
		for _, u := range routes.Items {
			if listed[u.GetNamespace()+"/"+u.GetName()] || !w.hasParents(&u) {
				continue
			}
			gone := RouteStatus{Namespace: u.GetNamespace(), Name: u.GetName(), Generation: u.GetGeneration()}
			do(HTTPRoutes, gone.Namespace, gone.Name, func(u *unstructured.Unstructured) error {
				return w.routeStatus(u, gone, now)
			})
		}
	}
	return res, errors.Join(errs...)
}

// hasParents reports whether route has status.parents entries of this
// controller.
func (w *Writer) hasParents(route *unstructured.Unstructured) bool {
	ps, _, _ := unstructured.NestedSlice(route.Object, "status", "parents")
	for _, p := range ps {
		if m, ok := p.(map[string]any); ok && m["controllerName"] == w.ControllerName {
			return true
		}
	}
	return false
}

func (w *Writer) now() metav1.Time {
	if w.Now != nil {
		return metav1.NewTime(w.Now())
	}
	return metav1.Now()
}

type outcome int

const (
	outcomeWritten outcome = iota
	outcomeUnchanged
	outcomeMissing
)

// update reads the object, applies mutate to a copy and writes the status
// when it changed, retrying on conflict.
func (w *Writer) update(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, mutate func(*unstructured.Unstructured) error) (outcome, error) {
	client := w.Client.Resource(gvr).Namespace(ns)
	out := outcomeWritten
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		obj, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = outcomeMissing
			return nil
		}
		if err != nil {
			return err
		}
		next := obj.DeepCopy()
		if err := mutate(next); err != nil {
			return err
		}
		if same(obj.Object["status"], next.Object["status"]) {
			out = outcomeUnchanged
			return nil
		}
		_, err = client.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			out = outcomeMissing
			return nil
		}
		out = outcomeWritten
		return err
	})
	return out, err
}

// gatewayStatus sets the Gateway's conditions and listeners.
func gatewayStatus(u *unstructured.Unstructured, g GatewayStatus, now metav1.Time) error {
	old, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err := unstructured.SetNestedSlice(u.Object, conditions(old, g.Conditions, g.Generation, now), "status", "conditions"); err != nil {
		return err
	}
	if g.Addresses != nil {
		addrs := make([]any, 0, len(g.Addresses))
		for _, a := range g.Addresses {
			addrs = append(addrs, map[string]any{"type": a.Type, "value": a.Value})
		}
		if err := unstructured.SetNestedSlice(u.Object, addrs, "status", "addresses"); err != nil {
			return err
		}
	}
	oldListeners, _, _ := unstructured.NestedSlice(u.Object, "status", "listeners")
	listeners := make([]any, 0, len(g.Listeners))
	for _, l := range g.Listeners {
		var prev []any
		for _, o := range oldListeners {
			if m, ok := o.(map[string]any); ok && m["name"] == l.Name {
				prev, _, _ = unstructured.NestedSlice(m, "conditions")
			}
		}
		kinds := make([]any, 0, len(l.SupportedKinds))
		for _, k := range l.SupportedKinds {
			kinds = append(kinds, jsonValue(k))
		}
		listeners = append(listeners, map[string]any{
			"name":           l.Name,
			"attachedRoutes": l.AttachedRoutes,
			"supportedKinds": kinds,
			"conditions":     conditions(prev, l.Conditions, g.Generation, now),
		})
	}
	return unstructured.SetNestedSlice(u.Object, listeners, "status", "listeners")
}

// routeStatus replaces this controller's status.parents entries of the
// route, keeping those of other controllers.
func (w *Writer) routeStatus(u *unstructured.Unstructured, r RouteStatus, now metav1.Time) error {
	old, _, _ := unstructured.NestedSlice(u.Object, "status", "parents")
	var parents, mine []any
	for _, p := range old {
		m, ok := p.(map[string]any)
		if ok && m["controllerName"] == w.ControllerName {
			mine = append(mine, m)
			continue
		}
		parents = append(parents, p)
	}
	for _, p := range r.Parents {
		ref := jsonValue(p.ParentRef)
		var prev []any
		for _, o := range mine {
			if m := o.(map[string]any); same(m["parentRef"], ref) {
				prev, _, _ = unstructured.NestedSlice(m, "conditions")
			}
		}
		parents = append(parents, map[string]any{
			"parentRef":      ref,
			"controllerName": w.ControllerName,
			"conditions":     conditions(prev, p.Conditions, r.Generation, now),
		})
	}
	if parents == nil {
		parents = []any{}
	}
	return unstructured.SetNestedSlice(u.Object, parents, "status", "parents")
}

// conditions are want as API conditions, with the lastTransitionTime of
// the old condition of the same type and status.
func conditions(old []any, want []Condition, generation int64, now metav1.Time) []any {
	out := make([]any, 0, len(want))
	for _, c := range want {
		at := now.UTC().Format(time.RFC3339)
		for _, o := range old {
			if m, ok := o.(map[string]any); ok && m["type"] == c.Type && m["status"] == c.Status {
				if t, ok := m["lastTransitionTime"].(string); ok {
					at = t
				}
			}
		}
		out = append(out, map[string]any{
			"type":               c.Type,
			"status":             c.Status,
			"reason":             c.Reason,
			"message":            "",
			"observedGeneration": generation,
			"lastTransitionTime": at,
		})
	}
	return out
}

// jsonValue is v with the types of a decoded JSON object the API server
// gives (integers as int64), so that it compares with and can be set in
// an unstructured object.
func jsonValue(v map[string]any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&out) != nil {
		return v
	}
	return fixNumbers(out).(map[string]any)
}

func fixNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = fixNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fixNumbers(e)
		}
	}
	return v
}

// same reports whether a and b are the same JSON value.
func same(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
