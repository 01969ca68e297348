package k8s_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/weftio/weft/pkg/config"
)

// checkWebhookRules checks every installation's renderer webhook
// configuration against its weft.yaml: one rule per watched type with
// enable_validation_webhook (as the API server names its resource) and
// none else, creates and updates only, the renderer's path, a timeout above
// validation_webhook.timeout and the same failure policy.
func (a *apiServer) checkWebhookRules(t *testing.T, builds map[string][]*unstructured.Unstructured) {
	t.Helper()
	found := 0
	for _, in := range installations {
		for _, o := range builds[in.name] {
			if o.GetKind() != "ValidatingWebhookConfiguration" || o.GetName() != "weft-renderer" {
				continue
			}
			found++
			t.Run(in.name, func(t *testing.T) {
				cfg, err := config.Load(in.weftYAML)
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				for _, typ := range cfg.WebhookTypes() {
					r := cfg.WatchedResources[typ]
					gv, err := schema.ParseGroupVersion(r.APIVersion)
					if err != nil {
						t.Fatal(err)
					}
					m, err := a.mapper.RESTMapping(gv.WithKind(r.Kind).GroupKind(), gv.Version)
					if err != nil {
						t.Fatalf("%s: %v", typ, err)
					}
					want = append(want, m.Resource.String())
				}
				vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, o)
				var got []string
				for _, w := range vwc.Webhooks {
					if p := w.ClientConfig.Service; p == nil || p.Path == nil || *p.Path != "/validate" {
						t.Errorf("webhook %s does not call the renderer's /validate", w.Name)
					}
					if w.TimeoutSeconds == nil || time.Duration(*w.TimeoutSeconds)*time.Second <= cfg.ValidationWebhook.Timeout.D() {
						t.Errorf("webhook %s: timeoutSeconds %v is not above validation_webhook.timeout %s", w.Name, w.TimeoutSeconds, cfg.ValidationWebhook.Timeout.D())
					}
					if w.FailurePolicy == nil || !strings.EqualFold(string(*w.FailurePolicy), cfg.ValidationWebhook.FailurePolicy) {
						t.Errorf("webhook %s: failurePolicy %v, weft.yaml's %s", w.Name, w.FailurePolicy, cfg.ValidationWebhook.FailurePolicy)
					}
					for _, r := range w.Rules {
						ops := fmt.Sprint(r.Operations)
						if ops != "[CREATE UPDATE]" {
							t.Errorf("webhook %s: operations %s, want CREATE and UPDATE", w.Name, ops)
						}
						for _, g := range r.APIGroups {
							for _, v := range r.APIVersions {
								for _, res := range r.Resources {
									got = append(got, schema.GroupVersionResource{Group: g, Version: v, Resource: res}.String())
								}
							}
						}
					}
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) || len(want) == 0 {
					t.Errorf("rules cover %v; %s's watched types with enable_validation_webhook are %v", got, in.weftYAML, want)
				}
			})
		}
	}
	if found == 0 {
		t.Error("no installation has the renderer's webhook configuration")
	}
}
