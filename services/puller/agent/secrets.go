package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/puller/cri"
)

// Secrets reads a Secret by namespace and name.
type Secrets interface {
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// KubeSecrets reads Secrets from the API server (GET, no watch and no
// cache: an agent needs the few its orders name, when it pulls).
type KubeSecrets struct{ Client kubernetes.Interface }

// Secret gets namespace/name.
func (k KubeSecrets) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return k.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// keyring reads the order's pull secrets into a keyring. A secret that is
// missing, that the agent may not read, or that is no pull secret is
// skipped and described (by name) in the problems, as the kubelet goes on
// without it; any other failure to read one (the API server unreachable,
// a timeout) is an error, retried: the pull is not tried without
// credentials it was given.
func (a *agent) keyring(ctx context.Context, o msg.PullOrder) (*cri.Keyring, []string, error) {
	var kr cri.Keyring
	var problems []string
	for _, ref := range o.PullSecrets {
		s, err := a.o.Secrets.Secret(ctx, ref.Namespace, ref.Name)
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, fmt.Sprintf("pull secret %s not found", ref))
			continue
		case apierrors.IsForbidden(err):
			problems = append(problems, fmt.Sprintf("pull secret %s may not be read by the agent (forbidden)", ref))
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("read pull secret %s: %w", ref, err)
		}
		if err := kr.AddSecret(s); err != nil {
			if !errors.Is(err, cri.ErrBadSecret) {
				return nil, nil, err
			}
			problems = append(problems, err.Error())
		}
	}
	return &kr, problems, nil
}

// pullWithKeyring pulls o.Image with each set of credentials the keyring
// has for it, most specific first, until one works, as the kubelet does
// (anonymously when it has none). The error of the last try is returned,
// and is permanent only when every try failed permanently.
func (a *agent) pullWithKeyring(ctx context.Context, o msg.PullOrder, kr *cri.Keyring) (string, error) {
	creds, ok, err := kr.Lookup(o.Image)
	if err != nil {
		return "", err
	}
	if !ok {
		return a.o.Runtime.Pull(ctx, o.Image, nil)
	}
	var tried []string
	permanent := true
	for i, c := range creds {
		ref, err := a.o.Runtime.Pull(ctx, o.Image, &c)
		if err == nil {
			return ref, nil
		}
		permanent = permanent && cri.IsPermanent(err)
		if i == len(creds)-1 || ctx.Err() != nil {
			prefix := strings.Join(tried, "; ")
			if prefix != "" {
				prefix += "; "
			}
			if !permanent {
				return "", fmt.Errorf("%swith pull secret %s: %s", prefix, c.Secret, err)
			}
			return "", fmt.Errorf("%swith pull secret %s: %w", prefix, c.Secret, err)
		}
		tried = append(tried, fmt.Sprintf("with pull secret %s: %v", c.Secret, err))
	}
	panic("unreachable: creds is not empty")
}
