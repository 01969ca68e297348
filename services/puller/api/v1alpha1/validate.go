package v1alpha1

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Default fills what the schema defaults and s leaves unset, for a policy
// that did not pass through an API server (a folder of manifests).
func (s *PrePullPolicySpec) Default() {
	if s.Mode == "" {
		s.Mode = DefaultMode
	}
	if len(s.Workloads.Kinds) == 0 {
		s.Workloads.Kinds = []WorkloadKind{KindDeployment, KindStatefulSet, KindDaemonSet}
	}
	setInt(&s.Limits.Cluster, DefaultCluster)
	setInt(&s.Limits.PerNode, DefaultPerNode)
	setInt(&s.Limits.PerRegistry, DefaultPerRegistry)
	setInt(&s.Retry.MaxAttempts, DefaultMaxAttempts)
	setDuration(&s.Retry.Backoff, DefaultBackoff)
	setDuration(&s.Retry.MaxBackoff, DefaultMaxBackoff)
	setDuration(&s.TTL, DefaultTTL)
	setDuration(&s.Job.Timeout, DefaultJobTimeout)
	setDuration(&s.GateTimeout, DefaultGateTimeout)
}

func setInt(v *int32, d int32) {
	if *v == 0 {
		*v = d
	}
}

func setDuration(v **metav1.Duration, d time.Duration) {
	if *v == nil {
		*v = &metav1.Duration{Duration: d}
	}
}

// ValidatePolicy checks a defaulted policy spec for what its schema cannot
// say, and again for what it can (a policy read from a folder of manifests
// never met the schema): label selectors' keys and values, namespace names,
// resource names and quantities (none negative, requests within limits),
// limits' order, durations' order. It returns every problem, each with its
// field path.
func ValidatePolicy(s *PrePullPolicySpec) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if s.Workloads.Selector == nil {
		errs = append(errs, field.Required(spec.Child("workloads", "selector"), "{} selects every workload"))
	}
	errs = append(errs, validateSelector(s.Workloads.Selector, spec.Child("workloads", "selector"))...)
	errs = append(errs, validateSelector(s.Workloads.NamespaceSelector, spec.Child("workloads", "namespaceSelector"))...)
	errs = append(errs, validateSelector(s.NodeSelector, spec.Child("nodeSelector"))...)
	for i, ns := range s.Workloads.Namespaces {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(spec.Child("workloads", "namespaces").Index(i), ns, msg))
		}
	}
	kinds := spec.Child("workloads", "kinds")
	for i, k := range s.Workloads.Kinds {
		if !slices.Contains([]WorkloadKind{KindDeployment, KindStatefulSet, KindDaemonSet}, k) {
			errs = append(errs, field.NotSupported(kinds.Index(i), k, []WorkloadKind{KindDeployment, KindStatefulSet, KindDaemonSet}))
		}
	}
	if s.Mode != ModeCRI && s.Mode != ModeJob {
		errs = append(errs, field.NotSupported(spec.Child("mode"), s.Mode, []PullMode{ModeCRI, ModeJob}))
	}
	errs = append(errs, validateLimits(s.Limits, spec.Child("limits"))...)
	errs = append(errs, validateRetry(s.Retry, spec.Child("retry"))...)
	errs = append(errs, positive(s.Job.Timeout, spec.Child("job", "timeout"))...)
	errs = append(errs, positive(s.GateTimeout, spec.Child("gateTimeout"))...)
	if s.TTL != nil && s.TTL.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("ttl"), s.TTL.Duration.String(), "must not be negative"))
	}
	if s.Job.Resources != nil {
		errs = append(errs, validateResources(s.Job.Resources, spec.Child("job", "resources"))...)
	}
	return errs
}

func validateSelector(sel *metav1.LabelSelector, path *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	return metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, path)
}

func validateLimits(l Limits, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, v := range map[string]int32{"cluster": l.Cluster, "perNode": l.PerNode, "perRegistry": l.PerRegistry} {
		if v < 1 {
			errs = append(errs, field.Invalid(path.Child(name), v, "must be at least 1"))
		}
	}
	if l.PerNode > l.Cluster {
		errs = append(errs, field.Invalid(path.Child("perNode"), l.PerNode, fmt.Sprintf("must not exceed cluster (%d)", l.Cluster)))
	}
	if l.PerRegistry > l.Cluster {
		errs = append(errs, field.Invalid(path.Child("perRegistry"), l.PerRegistry, fmt.Sprintf("must not exceed cluster (%d)", l.Cluster)))
	}
	slices.SortFunc(errs, func(a, b *field.Error) int { return cmp.Compare(a.Field, b.Field) })
	return errs
}

func validateRetry(r Retry, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.MaxAttempts < 1 {
		errs = append(errs, field.Invalid(path.Child("maxAttempts"), r.MaxAttempts, "must be at least 1"))
	}
	errs = append(errs, positive(r.Backoff, path.Child("backoff"))...)
	errs = append(errs, positive(r.MaxBackoff, path.Child("maxBackoff"))...)
	if r.Backoff != nil && r.MaxBackoff != nil && r.MaxBackoff.Duration < r.Backoff.Duration {
		errs = append(errs, field.Invalid(path.Child("maxBackoff"), r.MaxBackoff.Duration.String(),
			fmt.Sprintf("must not be shorter than backoff (%s)", r.Backoff.Duration)))
	}
	return errs
}

func positive(d *metav1.Duration, path *field.Path) field.ErrorList {
	if d != nil && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(path, d.Duration.String(), "must be positive")}
	}
	return nil
}

func validateResources(r *Resources, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, list := range []struct {
		name string
		rl   corev1.ResourceList
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		for _, name := range sortedNames(list.rl) {
			q := list.rl[name]
			p := path.Child(list.name).Key(string(name))
			for _, msg := range validation.IsQualifiedName(string(name)) {
				errs = append(errs, field.Invalid(p, name, msg))
			}
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(p, q.String(), "must not be negative"))
			}
		}
	}
	for _, name := range sortedNames(r.Requests) {
		req := r.Requests[name]
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must not exceed the limit (%s)", lim.String())))
		}
	}
	return errs
}

func sortedNames(rl corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(rl))
	for n := range rl {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ValidCondition is the policy's Valid condition for the verdict errs of
// ValidatePolicy on the policy's spec at generation.
func ValidCondition(generation int64, errs field.ErrorList) metav1.Condition {
	c := metav1.Condition{
		Type:               ConditionValid,
		Status:             metav1.ConditionTrue,
		ObservedGeneration: generation,
		Reason:             ReasonValid,
		Message:            "the policy is valid",
	}
	if len(errs) > 0 {
		c.Status = metav1.ConditionFalse
		c.Reason = ReasonInvalidSpec
		c.Message = errs.ToAggregate().Error()
	}
	return c
}

// SetValid validates p's spec (with defaults filled in a copy) and records
// the verdict in p's status: the Valid condition (its transition time
// moves only when its status changes) and observedGeneration. It reports
// whether p is valid.
func SetValid(p *PrePullPolicy) bool {
	spec := p.Spec
	spec.Default()
	errs := ValidatePolicy(&spec)
	meta.SetStatusCondition(&p.Status.Conditions, ValidCondition(p.Generation, errs))
	p.Status.ObservedGeneration = p.Generation
	return len(errs) == 0
}
