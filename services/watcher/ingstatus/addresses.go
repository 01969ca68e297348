package ingstatus

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	netv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/pkg/config"
)

// AddressSource follows where a fleet's addresses come from (a from of
// ingress_status or gateway_status): the one Service, the instance Pods,
// or fixed addresses.
type AddressSource struct {
	from     config.IngressStatusFrom
	services cache.Indexer // from.service: the one Service
	pods     cache.Indexer // from.pods: the instance Pods

	// Factories are the informers to start (none for fixed addresses);
	// Synced reports when their caches are filled.
	Factories []informers.SharedInformerFactory
	Synced    []cache.InformerSynced
}

// WatchAddresses prepares the informers of from's addresses, calling
// onChange on every change they see. The caller starts Factories and
// waits for Synced before calling Addresses.
func WatchAddresses(client kubernetes.Interface, from config.IngressStatusFrom, resync time.Duration, onChange func()) (*AddressSource, error) {
	a := &AddressSource{from: from}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { onChange() },
		UpdateFunc: func(any, any) { onChange() },
		DeleteFunc: func(any) { onChange() },
	}
	switch {
	case from.Service != "":
		ns, name := from.ServiceName()
		f := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
		inf := f.Core().V1().Services().Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("watching the Service: %w", err)
		}
		a.services, a.Synced, a.Factories = inf.GetIndexer(), append(a.Synced, inf.HasSynced), append(a.Factories, f)
	case from.Pods != nil:
		f := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(from.Pods.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = from.Pods.Selector }))
		inf := f.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("watching the instance Pods: %w", err)
		}
		a.pods, a.Synced, a.Factories = inf.GetIndexer(), append(a.Synced, inf.HasSynced), append(a.Factories, f)
	}
	return a, nil
}

// Addresses returns the fleet's addresses as the informers' caches show
// them; an error wrapping ErrAddresses when there is no answer.
func (a *AddressSource) Addresses() ([]netv1.IngressLoadBalancerIngress, error) {
	from := a.from
	switch {
	case from.Service != "":
		ns, name := from.ServiceName()
		obj, ok, err := a.services.GetByKey(ns + "/" + name)
		if err != nil || !ok {
			return nil, fmt.Errorf("%w: Service %s not found", ErrAddresses, from.Service)
		}
		svc := obj.(*corev1.Service)
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return nil, fmt.Errorf("%w: Service %s is of type %s, not LoadBalancer", ErrAddresses, from.Service, svc.Spec.Type)
		}
		return FromService(svc), nil
	case from.Pods != nil:
		var pods []*corev1.Pod
		for _, obj := range a.pods.List() {
			if p, ok := obj.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
		return FromPods(pods, from.Pods.Address), nil
	default:
		return FromAddresses(from.Addresses), nil
	}
}
